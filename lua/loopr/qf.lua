-- Quickfix lists Loopr fills, known by their titles: each is updated in place.

local M = {}

---The id of the quickfix list titled `title`, anywhere in the stack, or nil.
---@param title string
---@return integer|nil
function M.find(title)
  for nr = 1, vim.fn.getqflist({ nr = '$' }).nr do
    local qf = vim.fn.getqflist({ nr = nr, id = 0, title = 0 })
    if qf.title == title then
      return qf.id
    end
  end
end

---Replace the list titled `what.title` in place (the current list stays current), else push
---a new list after the current one so `:colder` returns to the previous list. Never opens
---or focuses the quickfix window.
---@param what vim.fn.setqflist.what `title` and the entries: `items`, or `lines` (with `efm`).
---@return integer qf_id
function M.set(what)
  local id = M.find(what.title)
  if id then
    vim.fn.setqflist({}, 'r', vim.tbl_extend('force', what, { id = id }))
    return id
  end
  vim.fn.setqflist({}, ' ', what)
  return vim.fn.getqflist({ id = 0 }).id
end

return M

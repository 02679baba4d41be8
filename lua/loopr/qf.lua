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

---Whether 'errorformat' finds a place in a file that exists in the quickfix list `items`.
---@param items vim.quickfix.entry[]
---@return boolean
local function names_a_file(items)
  for _, item in ipairs(items) do
    if item.valid == 1 and (item.bufnr or 0) > 0 then
      if vim.fn.filereadable(vim.api.nvim_buf_get_name(item.bufnr)) == 1 then
        return true
      end
    end
  end
  return false
end

---Sets the list titled `title` to a validation run's `output`, parsed with 'errorformat'
---like the output of `:make`. Where that finds no file to jump to (a runner it does not
---know), the `locations` the host read from the output as the common runners write them
---come first, each in a file of the project that exists, and the output follows as text.
---@param title string
---@param output string
---@param locations loopr.ValidationLocation[]|nil
---@return integer qf_id
function M.set_validation(title, output, locations)
  local lines = vim.split(output, '\n', { trimempty = true })
  local efm = vim.o.errorformat
  if #(locations or {}) == 0 or names_a_file(vim.fn.getqflist({ lines = lines, efm = efm }).items) then
    return M.set({ title = title, lines = lines, efm = efm })
  end
  local items = {}
  for _, place in ipairs(locations) do
    items[#items + 1] = { filename = place.filename, lnum = place.lnum, col = place.col, text = place.text }
  end
  for _, line in ipairs(lines) do
    items[#items + 1] = { text = line, valid = 0 }
  end
  return M.set({ title = title, items = items })
end

---Sets the list `Loopr: <label> verification` to a verification's findings (none: empty),
---each at its file and lines, its type the severity's (E, W, I).
---@param label string the phase's or spec's name
---@param findings loopr.VerificationItem[]
---@return integer qf_id
function M.set_verification(label, findings)
  local entries = {}
  for _, item in ipairs(findings) do
    entries[#entries + 1] = {
      filename = item.filename,
      lnum = item.lnum,
      end_lnum = item.end_lnum > 0 and item.end_lnum or nil,
      type = item.type,
      text = item.text,
    }
  end
  return M.set({ title = ('Loopr: %s verification'):format(label), items = entries })
end

---Sets the list `title` to a coding agent's plan: one entry per step, marked as the agent
---reported it (`[x]` done, `[~]` under way, `[ ]` to do), with no place to jump to.
---@param title string
---@param items loopr.AgentPlanItem[]
---@return integer qf_id
function M.set_agent_plan(title, items)
  local marks = { completed = '[x]', in_progress = '[~]' }
  local entries = {}
  for _, item in ipairs(items) do
    entries[#entries + 1] = { text = ('%s %s'):format(marks[item.status] or '[ ]', item.text), valid = 0 }
  end
  return M.set({ title = title, items = entries })
end

return M

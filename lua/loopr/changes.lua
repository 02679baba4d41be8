-- What a code loop changed: a quickfix list with one entry per changed hunk, and undoing it
-- all back to the baseline recorded when the loop started.

local M = {}

---@class loopr.ChangeItem
---@field location lsp.Location
---@field text string
---@field status "added"|"modified"|"deleted"

---Quickfix items for a `changes` reply.
---@param reply {loop_id: string, items: loopr.ChangeItem[]}|any
---@return vim.quickfix.entry[]
function M.items(reply)
  local items = {}
  for _, item in ipairs(type(reply) == 'table' and type(reply.items) == 'table' and reply.items or {}) do
    local location = item.location or {}
    local start = (location.range or {}).start or {}
    if type(location.uri) == 'string' then
      table.insert(items, {
        filename = vim.uri_to_fname(location.uri),
        lnum = (tonumber(start.line) or 0) + 1,
        col = 1,
        text = item.text,
        user_data = { loop_id = reply.loop_id, status = item.status },
        valid = 1,
      })
    end
  end
  return items
end

---Show the changes of `phase`'s newest code loop in the quickfix list.
---@param phase string Phase name or phase loop id.
---@param root string Project root.
---@return integer|nil qf_id
function M.open(phase, root)
  local reply, err = require('loopr.host').request('changes', { root = root, phase = phase })
  if err then
    require('loopr.notify').notify(err, vim.log.levels.ERROR)
    return nil
  end
  local items = M.items(reply)
  if #items == 0 then
    require('loopr.notify').notify(('Loopr: %s changed nothing'):format(phase), vim.log.levels.INFO)
    return nil
  end
  local id = require('loopr.tasks').apply(items, ('Loopr: %s changes'):format(phase))
  vim.cmd('botright copen')
  return id
end

---Restore every file `phase`'s newest code loop changed; open buffers are reloaded unless
---they hold unsaved changes.
---@param phase string Phase name or phase loop id.
---@param root string Project root.
---@return string[]|nil files The files restored.
function M.undo(phase, root)
  local files, err = require('loopr.host').request('undo', { root = root, phase = phase })
  if err then
    require('loopr.notify').notify(err, vim.log.levels.ERROR)
    return nil
  end
  files = type(files) == 'table' and files or {}
  for _, file in ipairs(files) do
    local buf = vim.fn.bufnr(vim.fn.fnameescape(file))
    if buf > 0 and vim.api.nvim_buf_is_loaded(buf) and not vim.bo[buf].modified then
      vim.api.nvim_buf_call(buf, function()
        vim.cmd('silent! edit')
      end)
    end
  end
  require('loopr.notify').notify(
    ('Loopr: restored %d file(s) changed by %s'):format(#files, phase),
    vim.log.levels.INFO
  )
  return files
end

return M

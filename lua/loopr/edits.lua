-- Edits from the host to files the user has open: applied to the buffer (so they show at once
-- and `u` undoes them) and saved, unless the buffer holds unsaved changes of the user's.

local M = {}

---The loaded buffer showing `path`, if any.
---@param path string Absolute path.
---@return integer|nil
local function loaded_buffer(path)
  local wanted = vim.fs.normalize(vim.uv.fs_realpath(path) or path)
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.bo[buf].buftype == '' then
      local name = vim.api.nvim_buf_get_name(buf)
      if name ~= '' and vim.fs.normalize(vim.uv.fs_realpath(name) or name) == wanted then
        return buf
      end
    end
  end
end

---Apply the host's edit to `path`'s buffer.
---@param path string Absolute path of the file.
---@param edit lsp.WorkspaceEdit Whole-line edits of that file.
---@param old string The file's text the edit was computed from.
---@return "applied"|"modified"|"not_loaded"
function M.apply(path, edit, old)
  local buf = loaded_buffer(path)
  if not buf then
    return 'not_loaded'
  end
  if vim.bo[buf].modified then
    return 'modified'
  end
  -- A buffer that does not hold the file's text (changed on disk, not reloaded) would take
  -- the edit on the wrong lines.
  local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n')
  if type(old) == 'string' and text ~= old:gsub('\n$', '') then
    return 'modified'
  end
  vim.lsp.util.apply_workspace_edit(edit, 'utf-8')
  -- Saved without autocommands, so what lands on disk is exactly the model's change.
  vim.api.nvim_buf_call(buf, function()
    vim.cmd('silent keepalt noautocmd write')
  end)
  return 'applied'
end

return M

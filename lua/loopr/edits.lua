-- Edits from the host to files the user has open: applied to the buffer (so they show at once
-- and `u` undoes them) and saved. A buffer with unsaved changes of the user's is never
-- touched. A buffer behind its file (changed on disk by a formatter, `sed -i`, a checkout) is
-- reloaded first, so the edit lands on the right lines and saving raises no "file changed"
-- prompt: nothing here may ever wait for the user.
--
-- The host calls `apply(path, edit, old, deadline)`, `check(path)`, `reload(paths)` and
-- `unsaved_text(path)` (src/bridge/buffers.rs).
-- An edit that reaches Neovim after its deadline is refused: the host stopped waiting for it
-- (Neovim was blocked) and told the model it was not made.

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

---Whether the buffer holds `text`, a file's content, as Neovim would read it.
---@param buf integer
---@param text string
---@return boolean
local function holds(buf, text)
  if vim.bo[buf].bomb then
    text = text:gsub('^\239\187\191', '')
  end
  if vim.bo[buf].fileformat == 'dos' then
    text = text:gsub('\r\n', '\n')
  end
  text = text:gsub('\n$', '')
  return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n') == text
end

---Reload an unmodified buffer whose file changed since it was read, without the W11 prompt:
---`:checktime` with 'autoread' on reloads silently (and refreshes the buffer's idea of the
---file's time, so the next `:write` does not ask either).
---@param buf integer
local function refresh(buf)
  local local_autoread = vim.bo[buf].autoread
  vim.api.nvim_buf_call(buf, function()
    vim.bo[buf].autoread = true
    local ok, err = pcall(vim.cmd, ('silent checktime %d'):format(buf))
    if local_autoread == nil then
      vim.cmd('set autoread<')
    else
      vim.bo[buf].autoread = local_autoread
    end
    if not ok then
      error(err, 0)
    end
  end)
end

---Reload `path`'s buffer silently if it is loaded and has no unsaved changes (those are never
---touched).
---@param path string Absolute path of the file.
---@return boolean reloaded
function M.reload_unmodified(path)
  local buf = loaded_buffer(path)
  if not buf or vim.bo[buf].modified then
    return false
  end
  refresh(buf)
  return true
end

---Bring the buffers of files a command changed on disk up to date: unmodified ones are
---reloaded silently (no prompt, and a later `:write` does not ask); the user is told about
---the ones with unsaved changes, which are left as they are.
---@param paths string[] Absolute paths of the files the command changed.
---@return {reloaded: integer, kept: string[]}
function M.reload(paths)
  local reloaded, kept = 0, {}
  for _, path in ipairs(type(paths) == 'table' and paths or {}) do
    local buf = type(path) == 'string' and vim.uv.fs_stat(path) and loaded_buffer(path)
    if buf then
      if vim.bo[buf].modified then
        table.insert(kept, vim.fn.fnamemodify(path, ':~:.'))
      else
        refresh(buf)
        reloaded = reloaded + 1
      end
    end
  end
  if #kept > 0 then
    require('loopr.notify').notify(
      ('Loopr: a command of the loop changed %s on disk; your unsaved changes are kept (:e! takes the new version)'):format(
        table.concat(kept, ', ')
      ),
      vim.log.levels.WARN
    )
  end
  return { reloaded = reloaded, kept = kept }
end

---Whether an edit of `path` could go into its buffer; changes nothing.
---@param path string Absolute path of the file.
---@return "not_loaded"|"ready"|"modified"
function M.check(path)
  local buf = loaded_buffer(path)
  if not buf then
    return 'not_loaded'
  end
  return vim.bo[buf].modified and 'modified' or 'ready'
end

---What `path`'s buffer holds where it has unsaved changes (what the user sees, newer than the
---file), as the file would hold it once written; nil where no buffer shows the file or it holds
---what the file does.
---@param path string Absolute path of the file.
---@return string|nil
function M.unsaved_text(path)
  local buf = type(path) == 'string' and loaded_buffer(path)
  if not buf or not vim.bo[buf].modified then
    return nil
  end
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  if #lines == 1 and lines[1] == '' then
    return ''
  end
  local eol = vim.bo[buf].fileformat == 'dos' and '\r\n' or '\n'
  local text = table.concat(lines, eol)
  if vim.bo[buf].eol or vim.bo[buf].fixeol then
    text = text .. eol
  end
  return text
end

---Apply the host's edit to `path`'s buffer and save it.
---@param path string Absolute path of the file.
---@param edit lsp.WorkspaceEdit Whole-line edits of that file.
---@param old string The file's text the edit was computed from (the file as it is now).
---@param deadline number Milliseconds since the epoch after which the edit must not be started.
---@return "applied"|"not_loaded"|"modified"|"stale"|"late" # `stale`: the buffer could not be brought up to date with the file; `late`: past the deadline. Either way nothing was done.
function M.apply(path, edit, old, deadline)
  if type(path) ~= 'string' or type(edit) ~= 'table' or type(old) ~= 'string' or type(deadline) ~= 'number' then
    error(
      'Loopr: edits.apply(path, edit, old, deadline) takes a path, a WorkspaceEdit, the file text and a deadline',
      0
    )
  end
  local seconds, microseconds = vim.uv.gettimeofday()
  if seconds * 1000 + math.floor(microseconds / 1000) > deadline then
    return 'late'
  end
  local buf = loaded_buffer(path)
  if not buf then
    return 'not_loaded'
  end
  if vim.bo[buf].modified then
    return 'modified'
  end
  refresh(buf)
  if vim.bo[buf].modified then
    return 'modified'
  end
  -- A buffer that does not hold the file's text would take the edit on the wrong lines.
  if not holds(buf, old) then
    return 'stale'
  end
  local text_edits = {}
  for _, edits in pairs(edit.changes or {}) do
    vim.list_extend(text_edits, edits)
  end
  -- Into this buffer, not one `apply_workspace_edit` might open for another spelling of the path.
  -- Each edit is its own undo step: Neovim closes an undo step only when a window's buffer
  -- changes hands or input arrives, so the changes made to a buffer no window shows would join
  -- into one (`u` after `:LooprUndo` would take the edit and the restore back together).
  -- Setting 'undolevels' to itself, in the buffer's context, is the documented way to close the
  -- open step before the edit.
  vim.api.nvim_buf_call(buf, function()
    vim.cmd('let &l:undolevels = &l:undolevels')
    vim.lsp.util.apply_text_edits(text_edits, buf, 'utf-8')
  end)
  -- Saved without autocommands, so what lands on disk is exactly the model's change.
  local ok, err = pcall(vim.api.nvim_buf_call, buf, function()
    vim.cmd('silent keepalt noautocmd write')
  end)
  if not ok then
    -- Not saved: take the edit back out, so the buffer is as the user left it.
    vim.api.nvim_buf_call(buf, function()
      vim.cmd('silent undo')
    end)
    error(('Loopr: could not save %s: %s'):format(path, err), 0)
  end
  return 'applied'
end

return M

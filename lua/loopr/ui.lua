-- Opening artifacts (plan.md, spec.md, phase.md) for review without disturbing typing.

local M = {}

---Whether the user is typing (insert, replace, terminal or command-line mode): windows then
---open without taking focus.
---@return boolean
function M.typing()
  local mode = vim.api.nvim_get_mode().mode
  return mode:find('^[iRtc]') ~= nil
end

---Load `path` as a listed file buffer, reloading it if it was loaded already.
---@param path string
---@return integer buf
local function load(path)
  local buf = vim.fn.bufadd(path)
  local was_loaded = vim.api.nvim_buf_is_loaded(buf)
  vim.bo[buf].buflisted = true
  vim.fn.bufload(buf)
  if was_loaded then
    if vim.bo[buf].modified then
      require('loopr.notify').notify(('Loopr: %s has unsaved changes; not reloaded'):format(path), vim.log.levels.WARN)
    else
      vim.api.nvim_buf_call(buf, function()
        vim.cmd('silent! edit')
      end)
    end
  end
  if vim.bo[buf].filetype == '' then
    vim.bo[buf].filetype = 'markdown'
  end
  return buf
end

---@param buf integer
---@return integer|nil win A window of the current tab showing `buf`.
local function visible(buf)
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    if vim.api.nvim_win_get_buf(win) == buf then
      return win
    end
  end
end

---A window of the current tab showing an unmodified older artifact of the same loop as
---`path` (e.g. the iteration before a revision), to show the new one in its place.
---@param path string
---@param busy boolean The user is typing; their window is left alone.
---@return integer|nil win
local function predecessor(path, busy)
  local paths = require('loopr.paths')
  local new = paths.artifact(path)
  if not new then
    return nil
  end
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    local buf = vim.api.nvim_win_get_buf(win)
    local old = paths.buf_artifact(buf)
    local mine = busy and win == vim.api.nvim_get_current_win()
    if old and old.ext == 'md' and old.loop_id == new.loop_id and not vim.bo[buf].modified and not mine then
      return win
    end
  end
end

---@param buf integer
---@param dir "right"|"below"
---@param enter boolean
---@return integer win
local function split(buf, dir, enter)
  local floating = vim.api.nvim_win_get_config(0).relative ~= ''
  return vim.api.nvim_open_win(buf, enter, { split = dir, win = floating and -1 or 0 })
end

---@param buf integer
---@return integer win
local function tab(buf)
  vim.cmd(('tab sbuffer %d'):format(buf))
  return vim.api.nvim_get_current_win()
end

---Show `path` in the window of the current tab that shows an older, unmodified artifact of
---the same loop (the iteration a revision replaced), if there is one; no window opens
---otherwise. For artifacts that need no review, which nobody may be looking at.
---@param path string Absolute path of the artifact (.md).
---@return integer|nil win The window now showing the artifact.
function M.replace_older(path)
  path = vim.fs.normalize(path)
  local older = predecessor(path, M.typing())
  if not older then
    return nil
  end
  vim.api.nvim_win_set_buf(older, load(path))
  return older
end

---Show `buf` (a Loopr scratch buffer): in the window of the current tab already showing it,
---else in a split (or tab) per the `layout` option, entered unless the user is typing.
---@param buf integer
---@return integer|nil win nil if a tab waits for normal mode.
function M.show(buf)
  local win = visible(buf)
  if win then
    if not M.typing() then
      vim.api.nvim_set_current_win(win)
    end
    return win
  end
  local layout = require('loopr.config').get().layout
  if layout == 'tab' then
    return tab(buf)
  end
  return split(buf, layout == 'split' and 'below' or 'right', not M.typing())
end

---Open an artifact for review in a split (or tab) per `layout`; a window of the current tab
---that shows an older, unmodified artifact of the same loop shows it instead. While the user
---types (insert, replace, terminal, command-line mode) the window opens without focus; a tab
---waits until the user is back in normal mode.
---@param path string Absolute path of the artifact (.md).
---@param layout loopr.Layout|nil Defaults to the `layout` option.
---@return integer|nil win The window showing the artifact, nil if deferred.
function M.open_artifact(path, layout)
  layout = layout or require('loopr.config').get().layout
  path = vim.fs.normalize(path)
  local buf = load(path)
  local win = visible(buf)
  if win then
    return win
  end
  local busy = M.typing()
  local older = predecessor(path, busy)
  if older then
    vim.api.nvim_win_set_buf(older, buf)
    return older
  end
  if layout == 'tab' then
    if busy then
      vim.api.nvim_create_autocmd('ModeChanged', {
        desc = 'Loopr: open deferred artifact tab',
        callback = function()
          local mode = vim.v.event.new_mode
          -- Wait for real normal mode ("n", "nt"), not insert-normal ("niI").
          if not mode:find('^n') or mode:find('^ni') then
            return false
          end
          vim.schedule(function()
            if vim.api.nvim_buf_is_valid(buf) and not visible(buf) then
              tab(buf)
            end
          end)
          return true
        end,
      })
      return nil
    end
    return tab(buf)
  end
  return split(buf, layout == 'split' and 'below' or 'right', not busy)
end

return M

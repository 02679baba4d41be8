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

---A window of any tab page showing `buf`, for the tab layout: a tab already open is reused.
---@param buf integer
---@return integer|nil win
local function in_any_tab(buf)
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    if vim.api.nvim_win_get_config(win).relative == '' then
      return win
    end
  end
end

---The window a new split opens beside: the current one, unless it is a float or a panel
---(the status list, the quickfix window), where the window the user came from is meant; 0
---when none fits (the split then spans the editor).
---@return integer win
local function origin()
  local function fits(win)
    return win ~= 0
      and vim.api.nvim_win_is_valid(win)
      and vim.api.nvim_win_get_config(win).relative == ''
      and not vim.b[vim.api.nvim_win_get_buf(win)].loopr_panel
      and vim.bo[vim.api.nvim_win_get_buf(win)].buftype ~= 'quickfix'
  end
  local current = vim.api.nvim_get_current_win()
  if fits(current) then
    return current
  end
  local previous = vim.fn.win_getid(vim.fn.winnr('#'))
  return fits(previous) and previous or 0
end

---The label of tab page `tab` in Loopr's tabline: the name of the Loopr view its current
---window shows, else what Neovim's own tabline shows (the buffer's name, its directories
---shortened).
---@param tab integer
---@return string
local function tab_label(tab)
  local buf = vim.api.nvim_win_get_buf(vim.api.nvim_tabpage_get_win(tab))
  local name = vim.b[buf].loopr_name
  if type(name) == 'string' and name ~= '' then
    return name
  end
  if vim.bo[buf].buftype == 'quickfix' then
    return '[Quickfix List]'
  end
  local file = vim.api.nvim_buf_get_name(buf)
  return file == '' and '[No Name]' or vim.fn.pathshorten(vim.fn.fnamemodify(file, ':~:.'))
end

---Neovim's tabline as it draws it by default (window count, `+` when modified, the label,
---the close mark), but with Loopr's views named as `t:loopr_name` names them.
---@return string
function M.tabline()
  local parts = {}
  local tabs = vim.api.nvim_list_tabpages()
  for number, tab in ipairs(tabs) do
    local windows, modified = 0, false
    for _, win in ipairs(vim.api.nvim_tabpage_list_wins(tab)) do
      if vim.api.nvim_win_get_config(win).relative == '' then
        windows = windows + 1
        modified = modified or vim.bo[vim.api.nvim_win_get_buf(win)].modified
      end
    end
    local selected = tab == vim.api.nvim_get_current_tabpage()
    local marks = (windows > 1 and tostring(windows) or '') .. (modified and '+' or '')
    table.insert(
      parts,
      ('%%#%s#%%%dT %s%s'):format(selected and 'TabLineSel' or 'TabLine', number, marks, marks ~= '' and ' ' or '')
    )
    table.insert(parts, tab_label(tab):gsub('%%', '%%%%') .. ' ')
  end
  local close = #tabs > 1 and '%=%#TabLine#%999XX' or ''
  return table.concat(parts) .. '%#TabLineFill#%T' .. close
end

---Open `buf` in a new tab page named `name`. Neovim's own tabline names a tab by the
---shortened path of its buffer (`l//status`, `~/.l/s/l/p/…/plan.md`): without a 'tabline'
---of the user's, Loopr draws the same one with its views' names.
---@param buf integer
---@param name string
---@return integer win
local function tab(buf, name)
  vim.cmd(('tab sbuffer %d'):format(buf))
  vim.t.loopr_name = name
  if vim.o.tabline == '' then
    vim.o.tabline = "%!v:lua.require'loopr.ui'.tabline()"
  end
  return vim.api.nvim_get_current_win()
end

---@class loopr.ViewOpts
---@field name? string What a tab page showing it is called (`t:loopr_name`); default: `b:loopr_name`, else the buffer's name.
---@field panel? integer A list that fits its content (the status window): in the split layouts it opens below, across the editor, this many lines high.
---@field layout? loopr.Layout Default: the `layout` option.

---Show `buf` (a Loopr view: status, transcript, MCP servers, log, artifact), the one way
---every Loopr window opens: in the window already showing it (in the current tab page; in
---any, with the tab layout), else per `layout` (a split to the right or below the window
---the user works in, or a tab page named after the view). The window is entered unless the
---user is typing; a tab page then waits until they are back in Normal mode.
---@param buf integer
---@param opts? loopr.ViewOpts
---@return integer|nil win nil if a tab waits for Normal mode.
function M.open(buf, opts)
  opts = opts or {}
  local layout = opts.layout or require('loopr.config').get().layout
  local name = opts.name or vim.b[buf].loopr_name or vim.api.nvim_buf_get_name(buf)
  vim.b[buf].loopr_name = name
  local busy = M.typing()
  local win = visible(buf) or (layout == 'tab' and in_any_tab(buf)) or nil
  if win then
    if not busy then
      vim.api.nvim_set_current_win(win)
    end
    return win
  end
  if layout == 'tab' then
    if not busy then
      return tab(buf, name)
    end
    vim.api.nvim_create_autocmd('ModeChanged', {
      desc = 'Loopr: open a deferred tab page',
      callback = function()
        local mode = vim.v.event.new_mode
        -- Wait for real normal mode ("n", "nt"), not insert-normal ("niI").
        if not mode:find('^n') or mode:find('^ni') then
          return false
        end
        vim.schedule(function()
          if vim.api.nvim_buf_is_valid(buf) and not in_any_tab(buf) then
            tab(buf, name)
          end
        end)
        return true
      end,
    })
    return nil
  end
  if opts.panel then
    vim.b[buf].loopr_panel = true
    return vim.api.nvim_open_win(buf, not busy, { split = 'below', win = -1, height = opts.panel })
  end
  local beside = origin()
  return vim.api.nvim_open_win(
    buf,
    not busy,
    { split = layout == 'split' and 'below' or 'right', win = beside == 0 and -1 or beside }
  )
end

---Close the current window, which shows Loopr view `buf` (with the tab layout, its tab page
---goes with it); in the last window the buffer goes instead.
---@param buf integer
function M.close(buf)
  if not pcall(vim.api.nvim_win_close, 0, false) then
    vim.api.nvim_buf_delete(buf, { force = vim.bo[buf].buftype ~= '' })
  end
end

---Map `q` in `buf` to `M.close`.
---@param buf integer
---@param what string What the buffer shows, for the mapping's description.
function M.map_close(buf, what)
  vim.keymap.set('n', 'q', function()
    M.close(buf)
  end, { buffer = buf, nowait = true, desc = 'Loopr: close the ' .. what })
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

---Show `buf` (a Loopr scratch buffer) as `M.open` does.
---@param buf integer
---@return integer|nil win nil if a tab waits for normal mode.
function M.show(buf)
  return M.open(buf)
end

---What an artifact is called where a tab shows it: its title line (`Plan: Add a --version
---flag`), else its file name.
---@param buf integer
---@param path string
---@return string
local function artifact_name(buf, path)
  local title = (vim.api.nvim_buf_get_lines(buf, 0, 1, false)[1] or ''):match('^#%s+(.-)%s*$')
  return (title and title ~= '') and title or vim.fs.basename(path)
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
  return M.open(buf, { layout = layout, name = artifact_name(buf, path) })
end

return M

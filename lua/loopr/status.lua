-- The `loopr://status` buffer: the project's loops as a tree, with keymaps acting on them.

local M = {}

local NAME = 'loopr://status'
local MIN_HEIGHT = 3
local NAMESPACE = vim.api.nvim_create_namespace('loopr_status')

-- Highlight groups, linked by default so that colour schemes can restyle them.
vim.api.nvim_set_hl(0, 'LooprStatusHeader', { link = 'Title', default = true })
vim.api.nvim_set_hl(0, 'LooprStatusInvalidated', { link = 'Comment', default = true })
vim.api.nvim_set_hl(0, 'LooprStatusHint', { link = 'Comment', default = true })

local status_table = require('loopr.status_table')
local text, parent_of = status_table.text, status_table.parent_of

---@return integer|nil buf The status buffer if it exists.
local function find()
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.api.nvim_buf_get_name(buf) == NAME then
      return buf
    end
  end
end

---What the status buffer shows: the host's rows (newest first), or why there are none.
---@type {rows: loopr.LoopRecord[]|nil, err: string|nil}
local shown = { rows = {} }

---The record on the cursor line of `win`, if any.
---@param buf integer
---@param win integer
---@return loopr.LoopRecord|nil
local function record_at(buf, win)
  local records = vim.b[buf].loopr_records or {}
  local r = records[vim.api.nvim_win_get_cursor(win)[1]]
  return type(r) == 'table' and r or nil
end

---Make window `win` as high as `count` lines and its winbar, within limits: at least
---MIN_HEIGHT, at most half the editor.
---@param win integer
---@param count integer
local function fit_height(win, count)
  local max = math.max(MIN_HEIGHT, math.floor((vim.o.lines - vim.o.cmdheight) / 2))
  local height = math.max(MIN_HEIGHT, math.min(count + 1, max))
  local cmdheight = vim.o.cmdheight
  pcall(vim.api.nvim_win_set_height, win, height)
  if vim.o.cmdheight ~= cmdheight then
    -- A window with none above or below it takes the height from the command line.
    vim.o.cmdheight = cmdheight
  end
  vim.w[win].loopr_height = vim.api.nvim_win_get_height(win)
end

---The display cells the table may take: the narrowest text area of the windows showing
---`buf` (else the editor's width, where it opens). Without a screen (a headless editor)
---there is no width to fit: nil, nothing is cut.
---@param buf integer
---@return integer|nil
local function text_width(buf)
  if #vim.api.nvim_list_uis() == 0 then
    return nil
  end
  local width = nil
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    local info = vim.fn.getwininfo(win)[1]
    width = math.min(width or math.huge, info.width - info.textoff)
  end
  return width or vim.o.columns
end

---Draw what `shown` holds into the buffer, fitted to its windows. Every window's cursor
---stays on the loop it was on; one on no loop (a new window, the header) goes to the
---newest loop; else it stays on the same line.
---@param buf integer
local function render(buf)
  local lines, records
  if shown.rows then
    lines, records = status_table.format(shown.rows, text_width(buf))
  else
    lines, records = { 'Loopr: status unavailable: ' .. (shown.err or '?'):gsub('\n', ' ') }, { false }
  end
  local newest = shown.rows and shown.rows[1] and shown.rows[1].id
  local cursors = {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    local r = record_at(buf, win)
    cursors[win] = { pos = vim.api.nvim_win_get_cursor(win), id = r and r.id or newest }
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  vim.b[buf].loopr_records = records
  vim.b[buf].loopr_width = text_width(buf)
  vim.api.nvim_buf_clear_namespace(buf, NAMESPACE, 0, -1)
  for lnum, line in ipairs(lines) do
    local r = records[lnum]
    local group = (lnum == 1 and 'LooprStatusHeader')
      or (r and r.status == 'invalidated' and 'LooprStatusInvalidated')
      or nil
    if group then
      vim.api.nvim_buf_set_extmark(buf, NAMESPACE, lnum - 1, 0, { end_col = #line, hl_group = group })
    end
  end
  for win in pairs(cursors) do
    -- Windows keep growing with the tree unless the user resized them.
    if vim.w[win].loopr_height == vim.api.nvim_win_get_height(win) then
      fit_height(win, #lines)
    end
  end
  for win, cursor in pairs(cursors) do
    local row = math.min(cursor.pos[1], #lines)
    for lnum, r in ipairs(records) do
      if r and cursor.id and r.id == cursor.id then
        row = lnum
        break
      end
    end
    pcall(vim.api.nvim_win_set_cursor, win, { row, cursor.pos[2] })
  end
end

---The project's loops as the host reports them, costs priced with the current setup()'s
---prices.
---@param root string
---@return loopr.LoopRecord[]|nil rows
---@return string|nil err
function M.rows(root)
  local prices = require('loopr.config').get().prices
  -- An empty table is left out: msgpack cannot tell an empty map from an empty list.
  local rows, err = require('loopr.host').request('status', { root = root, prices = next(prices) and prices or nil })
  if err then
    return nil, err
  end
  return type(rows) == 'table' and rows or {}
end

---The loop's current .md, as the host reports it.
---@param r loopr.LoopRecord
---@return string|nil
local function artifact_of(r)
  if type(r.artifact_path) == 'string' and r.artifact_path ~= '' then
    return r.artifact_path
  end
end

---The loop as the host names it (`plan "{task}"`, `phase "{name}"`), as every message does.
---@param r loopr.LoopRecord
---@return string
local function label(r)
  return type(r.label) == 'string' and r.label or ('%s %s'):format(r.type, r.id)
end

---The loops below loop `id` (in `records`, as rendered) that a cancel ends.
---@param records (loopr.LoopRecord|false)[]
---@param id string
---@return loopr.LoopRecord[]
local function cancellable_descendants(records, id)
  local below, cancellable = { [id] = true }, {}
  -- Records are in tree order: every loop comes after its parent.
  for _, r in ipairs(records) do
    if r and below[parent_of(r) or ''] then
      below[r.id] = true
      if r.cancellable then
        table.insert(cancellable, r)
      end
    end
  end
  return cancellable
end

---The phase loop of a row: the phase itself, or the phase a code loop implements.
---@param r loopr.LoopRecord
---@return string|nil
local function phase_of(r)
  if r.type == 'phase' then
    return r.id
  elseif r.type == 'code' then
    return parent_of(r)
  end
end

---Show the whole error of `r` in a floating window.
---@param r loopr.LoopRecord
local function show_error(r)
  local error_text = text(r.error)
  if error_text == '' then
    require('loopr.notify').notify(('Loopr: %s has no error'):format(label(r)), vim.log.levels.INFO)
    return
  end
  local lines = vim.split(('%s (%s): %s'):format(label(r), r.status, error_text), '\n')
  vim.lsp.util.open_floating_preview(lines, 'text', {
    border = 'rounded',
    focus_id = 'loopr_status_error',
    max_width = math.max(40, math.floor(vim.o.columns * 0.8)),
    wrap = true,
  })
end

---A key's action on the phase of the loop under the cursor (see `phase_of`).
---@param lhs string The key, for the message on a line that is no phase.
---@param action fun(phase: string)
---@return fun(r: loopr.LoopRecord)
local function on_phase(lhs, action)
  return function(r)
    local phase = phase_of(r)
    if not phase then
      local message = 'Loopr: %s is no phase; %s acts on the phase (or code loop) under the cursor'
      require('loopr.notify').notify(message:format(label(r), lhs), vim.log.levels.WARN)
      return
    end
    action(phase)
  end
end

---Refresh the status buffer once the host has answered a key's request.
local function refreshed()
  M.refresh()
end

---A key's action: the function `name` of require('loopr') on the loop under the cursor.
---@param name "approve"|"retry"
---@return fun(r: loopr.LoopRecord, root: string)
local function by_id(name)
  return function(r, root)
    require('loopr')[name](r.id, { root = root }, refreshed)
  end
end

---@class loopr.StatusKey
---@field lhs string
---@field hint string Its word in the winbar.
---@field desc string What it does, as the mapping's description and `g?` say.
---@field loop? fun(r: loopr.LoopRecord, root: string, buf: integer) An action on the loop under the cursor.
---@field run? fun(buf: integer) An action on the window.
---@field more? boolean Shown only when the winbar cannot show every key.
---@field spare? boolean Shown only where the winbar has room for it after every other key
---(`g?` lists it always).

---The status window's keys, once: the winbar's hint is made of them and they are mapped
---from them. In the order the hint keeps them when the window is too narrow for all.
---@type loopr.StatusKey[]
local KEYS
KEYS = {
  {
    lhs = '<CR>',
    hint = 'open',
    desc = "Loopr: open the loop's artifact",
    loop = function(r)
      local path = artifact_of(r)
      if not path then
        require('loopr.notify').notify(('Loopr: %s has no artifact yet'):format(label(r)), vim.log.levels.INFO)
        return
      end
      local win = require('loopr.ui').open_artifact(path)
      if win then
        vim.api.nvim_set_current_win(win)
      end
    end,
  },
  {
    lhs = 'a',
    hint = 'approve',
    desc = 'Loopr: approve this loop (:LooprApprove)',
    loop = by_id('approve'),
  },
  {
    lhs = 'r',
    hint = 'revise',
    desc = 'Loopr: revise this loop with feedback (:LooprRevise)',
    loop = function(r, root)
      -- Without feedback, :LooprRevise asks for it.
      require('loopr').revise('', { id = r.id, root = root }, refreshed)
    end,
  },
  {
    lhs = 'i',
    hint = 'run',
    desc = "Loopr: implement this phase (a code loop's phase) with a code loop (:LooprRun)",
    loop = on_phase('i', function(phase)
      require('loopr').run(phase, refreshed)
    end),
  },
  {
    lhs = 'T',
    hint = 'tasks',
    desc = "Loopr: this phase's tasks in the quickfix list (:LooprTasks)",
    loop = on_phase('T', function(phase)
      require('loopr').tasks(phase)
    end),
  },
  {
    lhs = 'c',
    hint = 'coverage',
    spare = true,
    desc = "Loopr: this spec's (a phase's spec's) requirements not yet verified in the quickfix list (:LooprRequirements)",
    loop = function(r)
      if r.type == 'plan' then
        local message = 'Loopr: %s is no spec; c acts on the spec (or a phase of it) under the cursor'
        require('loopr.notify').notify(message:format(label(r)), vim.log.levels.WARN)
        return
      end
      require('loopr').requirements(nil, r.id)
    end,
  },
  {
    lhs = 't',
    hint = 'transcript',
    desc = "Loopr: follow this loop's transcript (:LooprTranscript)",
    loop = function(r, root)
      require('loopr').transcript(r.id, { root = root })
    end,
  },
  {
    lhs = 'R',
    hint = 'retry',
    desc = 'Loopr: retry this loop (:LooprRetry)',
    loop = by_id('retry'),
  },
  {
    lhs = 'x',
    hint = 'cancel',
    desc = 'Loopr: cancel this loop and its descendants (:LooprCancel)',
    loop = function(r, root, buf)
      local below = cancellable_descendants(vim.b[buf].loopr_records or {}, r.id)
      if #below > 0 then
        local question = ('Cancel %s and its %d unfinished descendant loop(s)?'):format(label(r), #below)
        if vim.fn.confirm(question, '&Yes\n&No', 2) ~= 1 then
          return
        end
      end
      require('loopr').cancel(r.id, { root = root }, refreshed)
    end,
  },
  { lhs = 'K', hint = 'error', desc = "Loopr: show this loop's error in full", loop = show_error },
  {
    lhs = 'q',
    hint = 'close',
    desc = 'Loopr: close the status window',
    run = function(buf)
      require('loopr.ui').close(buf)
    end,
  },
  {
    lhs = 'g?',
    hint = 'all keys',
    desc = "Loopr: list the status window's keys",
    more = true,
    run = function()
      local lines = {}
      for _, key in ipairs(KEYS) do
        table.insert(lines, ('%-5s %s'):format(key.lhs, (key.desc:gsub('^Loopr: ', ''))))
      end
      require('loopr.notify').notify('Loopr status keys:\n' .. table.concat(lines, '\n'), vim.log.levels.INFO)
    end,
  },
}

---The keys as the winbar shows them, fitted to `width` display cells: as many as fit, in
---KEYS' order, then `g? all keys` when some did not; spare keys only where every other key
---fits too.
---@param width? number Default: no limit.
---@return string
function M.hint(width)
  width = width or math.huge
  local all, more, spare = {}, {}, {}
  for _, key in ipairs(KEYS) do
    local list = (key.more and more) or (key.spare and spare) or all
    table.insert(list, key.lhs .. ' ' .. key.hint)
  end
  if vim.fn.strdisplaywidth(table.concat(all, '  ')) <= width then
    for _, entry in ipairs(spare) do
      if vim.fn.strdisplaywidth(table.concat(all, '  ') .. '  ' .. entry) <= width then
        table.insert(all, entry)
      end
    end
    return table.concat(all, '  ')
  end
  local fitting = {}
  for _, entry in ipairs(all) do
    local candidate = vim.list_extend(vim.list_extend(vim.list_slice(fitting), { entry }), more)
    if vim.fn.strdisplaywidth(table.concat(candidate, '  ')) > width then
      break
    end
    table.insert(fitting, entry)
  end
  return table.concat(vim.list_extend(fitting, more), '  ')
end

---The status window's winbar (`%{%…%}`): the keys that fit the window (all of them
---without a screen).
---@return string
function M.winbar()
  local win = vim.g.statusline_winid or 0
  local width = #vim.api.nvim_list_uis() > 0 and vim.api.nvim_win_get_width(win) or nil
  return '%#LooprStatusHint#' .. M.hint(width)
end

---Buffer-local keymaps, from KEYS.
---@param buf integer
local function keymaps(buf)
  for _, key in ipairs(KEYS) do
    vim.keymap.set('n', key.lhs, function()
      if key.run then
        return key.run(buf)
      end
      local r = record_at(buf, vim.api.nvim_get_current_win())
      if not r then
        require('loopr.notify').notify('Loopr: no loop on this line', vim.log.levels.WARN)
        return
      end
      key.loop(r, vim.b[buf].loopr_root or require('loopr.config').root(), buf)
    end, { buffer = buf, nowait = true, desc = key.desc })
  end
end

---@param root string
---@return integer buf
local function create(root)
  for _, stale in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_get_name(stale) == NAME then
      vim.api.nvim_buf_delete(stale, { force = true })
    end
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, NAME)
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].swapfile = false
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = 'loopr-status'
  vim.b[buf].loopr_root = root
  vim.b[buf].loopr_name = 'Loopr status'
  keymaps(buf)
  local group = vim.api.nvim_create_augroup('loopr_status', { clear = true })
  vim.api.nvim_create_autocmd('User', {
    group = group,
    pattern = 'LooprLoopUpdated',
    desc = 'Refresh the Loopr status buffer',
    callback = function()
      M.refresh()
    end,
  })
  vim.api.nvim_create_autocmd('BufWinEnter', {
    group = group,
    buffer = buf,
    desc = "Loopr: the status window's keys in its winbar",
    callback = function()
      -- Run in the window the buffer enters, focused or not; local to the buffer there.
      vim.wo[vim.api.nvim_get_current_win()][0].winbar = "%{%v:lua.require'loopr.status'.winbar()%}"
    end,
  })
  vim.api.nvim_create_autocmd({ 'WinResized', 'VimResized' }, {
    group = group,
    desc = 'Loopr: fit the status table to its window again',
    callback = function()
      if vim.api.nvim_buf_is_valid(buf) and vim.b[buf].loopr_width ~= text_width(buf) then
        render(buf)
      end
    end,
  })
  vim.api.nvim_create_autocmd('BufWipeout', {
    group = group,
    buffer = buf,
    callback = function()
      vim.schedule(function()
        if not find() then
          pcall(vim.api.nvim_del_augroup_by_name, 'loopr_status')
        end
      end)
    end,
  })
  return buf
end

---Refresh the status buffer if it is open; never moves focus.
---@return boolean refreshed
function M.refresh()
  local buf = find()
  if not buf then
    return false
  end
  shown.rows, shown.err = M.rows(vim.b[buf].loopr_root or require('loopr.config').root())
  render(buf)
  return true
end

---Open (or focus and refresh) the status buffer for the current project, per the `layout`
---option: below, across the editor, in the split layouts; a tab page with `tab`.
---@return integer|nil buf nil when the host could not answer (error notified).
function M.open()
  local root = require('loopr.config').root()
  local rows, err = M.rows(root)
  if not rows then
    require('loopr.notify').notify(err or 'Loopr: status unavailable', vim.log.levels.ERROR)
    return nil
  end
  shown.rows, shown.err = rows, nil
  local buf = find() or create(root)
  vim.b[buf].loopr_root = root
  render(buf)
  local win = require('loopr.ui').open(buf, { panel = MIN_HEIGHT })
  if win then
    vim.wo[win].wrap = false
    -- Fitted to the window it opened in; its cursor on the newest loop.
    render(buf)
    -- A window alone in its tab page keeps its height.
    if #vim.api.nvim_tabpage_list_wins(vim.api.nvim_win_get_tabpage(win)) > 1 then
      fit_height(win, vim.api.nvim_buf_line_count(buf))
    end
  end
  return buf
end

return M

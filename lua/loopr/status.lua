-- The `loopr://status` buffer: the project's loops as a tree, with keymaps acting on them.

local M = {}

local NAME = 'loopr://status'
local ERROR_WIDTH = 60
local NAME_WIDTH = 40
local INDENT = '  '
local MIN_HEIGHT = 3
local NAMESPACE = vim.api.nvim_create_namespace('loopr_status')

-- Highlight groups, linked by default so that colour schemes can restyle them.
vim.api.nvim_set_hl(0, 'LooprStatusHeader', { link = 'Title', default = true })
vim.api.nvim_set_hl(0, 'LooprStatusInvalidated', { link = 'Comment', default = true })
vim.api.nvim_set_hl(0, 'LooprStatusHint', { link = 'Comment', default = true })

---@param s string
---@param width integer
---@return string
local function truncate(s, width)
  s = s:gsub('%s+', ' ')
  if vim.fn.strchars(s) <= width then
    return s
  end
  return vim.fn.strcharpart(s, 0, width - 1) .. '…'
end

---@param v any
---@return string
local function text(v)
  if v == nil or v == vim.NIL then
    return ''
  end
  return tostring(v)
end

---@param r loopr.LoopRecord
---@return string|nil
local function parent_of(r)
  return type(r.parent) == 'string' and r.parent or nil
end

---Records in tree order with their depth: roots (no known parent) newest first, each
---followed by its children (current ones, then invalidated ones, each in creation order),
---depth first.
---@param rows loopr.LoopRecord[] Newest first, as the host sends them.
---@return {record: loopr.LoopRecord, depth: integer}[]
function M.tree(rows)
  local known, children = {}, {}
  for _, r in ipairs(rows) do
    known[r.id] = true
  end
  -- Under each parent, current loops first and those a revision invalidated after them, each
  -- in creation order, so replacements and what they replaced stay apart.
  for _, invalidated in ipairs({ false, true }) do
    for i = #rows, 1, -1 do
      local parent = parent_of(rows[i])
      if parent and known[parent] and (rows[i].status == 'invalidated') == invalidated then
        children[parent] = children[parent] or {}
        table.insert(children[parent], rows[i])
      end
    end
  end
  local ordered, seen = {}, {}
  local function walk(r, depth)
    if seen[r.id] then
      return
    end
    seen[r.id] = true
    table.insert(ordered, { record = r, depth = depth })
    for _, child in ipairs(children[r.id] or {}) do
      walk(child, depth + 1)
    end
  end
  for _, r in ipairs(rows) do
    local parent = parent_of(r)
    if not (parent and known[parent]) then
      walk(r, 0)
    end
  end
  return ordered
end

---A count Loopr estimated, with the digits that mean something: `~350`, `~1.2k`, `~48k`,
---`~1.3M` (as the host's CLI shows it).
---@param count integer
---@return string
function M.approximate(count)
  if count < 1000 then
    return ('~%d'):format(count)
  end
  local tenths_of_thousands = math.floor((count + 50) / 100)
  if tenths_of_thousands < 100 then
    return ('~%d.%dk'):format(math.floor(tenths_of_thousands / 10), tenths_of_thousands % 10)
  end
  local thousands = math.floor((count + 500) / 1000)
  if thousands < 1000 then
    return ('~%dk'):format(thousands)
  end
  local tenths_of_millions = math.floor((count + 50000) / 100000)
  return ('~%d.%dM'):format(math.floor(tenths_of_millions / 10), tenths_of_millions % 10)
end

---Tokens as `1200 in (900 cached, 300 cache write) · 80 out`: in counts every input
---token, the parentheses what of it the provider's cache served or stored. Estimated
---counts (the server reported no usage) read `~1.7k in · ~25 out`.
---@param spend loopr.Spend|nil
---@return string
function M.tokens(spend)
  if type(spend) ~= 'table' then
    return ''
  end
  local count = function(n)
    return spend.estimated == true and M.approximate(n) or ('%d'):format(n)
  end
  local cache_read, cache_write = spend.cache_read or 0, spend.cache_write or 0
  local input = (spend.input or 0) + cache_read + cache_write
  local cached = {}
  if cache_read > 0 then
    table.insert(cached, ('%d cached'):format(cache_read))
  end
  if cache_write > 0 then
    table.insert(cached, ('%d cache write'):format(cache_write))
  end
  local note = #cached > 0 and (' (%s)'):format(table.concat(cached, ', ')) or ''
  return ('%s in%s · %s out'):format(count(input), note, count(spend.output or 0))
end

---Dollars with precision where they are small: `$0.0123`, `$0.456`, `$12.35`.
---@param usd number
---@return string
function M.dollars(usd)
  if usd < 0.1 then
    return ('$%.4f'):format(usd)
  elseif usd < 10 then
    return ('$%.3f'):format(usd)
  end
  return ('$%.2f'):format(usd)
end

---The estimated cost: `?` when no model is priced, `+?` after a partial estimate.
---@param spend loopr.Spend|nil
---@return string
function M.cost(spend)
  if type(spend) ~= 'table' then
    return ''
  end
  local unknown = type(spend.cost_unknown) == 'table' and #spend.cost_unknown > 0
  if type(spend.cost_usd) ~= 'number' then
    return '?'
  end
  return M.dollars(spend.cost_usd) .. (unknown and '+?' or '')
end

---A plan tree's spend in one cell, naming the models without a price.
---@param spend loopr.Spend|vim.NIL|nil
---@return string
function M.tree_spend(spend)
  if type(spend) ~= 'table' then
    return ''
  end
  local cell = M.tokens(spend) .. ' · ' .. M.cost(spend)
  local unknown = {}
  for _, model in ipairs(type(spend.cost_unknown) == 'table' and spend.cost_unknown or {}) do
    table.insert(unknown, model ~= '' and model or 'turns of an earlier version')
  end
  if #unknown > 0 then
    cell = cell .. (' (cost unknown for %s)'):format(table.concat(unknown, ', '))
  end
  return cell
end

---The key-hint line at the bottom of the buffer.
---@return string
function M.hint()
  local retry = require('loopr').retry and '  R retry' or ''
  return ('keys: <CR> open  t transcript  a approve  r revise  x cancel%s  K error  q close'):format(retry)
end

---Format loop records as an aligned tree with a header line first and the key hints last.
---@param rows loopr.LoopRecord[] Newest first.
---@return string[] lines
---@return (loopr.LoopRecord|false)[] records The record of each line, false for others.
function M.format(rows)
  local cells = { { 'LOOP', 'NAME', 'ID', 'STATUS', 'ITER', 'REVIEWS', 'TOKENS', 'COST', 'TREE TOTAL', 'ERROR' } }
  local records = { false }
  for _, node in ipairs(M.tree(rows)) do
    local r = node.record
    local name = r.type == 'plan' and text(r.task) or text(r.name)
    table.insert(cells, {
      INDENT:rep(node.depth) .. text(r.type),
      truncate(name, NAME_WIDTH),
      text(r.id),
      text(r.status),
      text(r.iteration),
      text(r.review_passes),
      M.tokens(r.spend),
      M.cost(r.spend),
      M.tree_spend(r.tree),
      -- A pending loop has no error; what it waits for shows there.
      truncate(text(r.error) ~= '' and text(r.error) or text(r.waits_for), ERROR_WIDTH),
    })
    table.insert(records, r)
  end
  local widths = {}
  for _, row in ipairs(cells) do
    for i, cell in ipairs(row) do
      widths[i] = math.max(widths[i] or 0, vim.fn.strdisplaywidth(cell))
    end
  end
  local lines = {}
  for _, row in ipairs(cells) do
    local parts = {}
    for i, cell in ipairs(row) do
      parts[i] = cell .. string.rep(' ', widths[i] - vim.fn.strdisplaywidth(cell))
    end
    table.insert(lines, (table.concat(parts, '  '):gsub('%s+$', '')))
  end
  if #rows == 0 then
    table.insert(lines, '(no loops yet; start one with :LooprPlan {task})')
    table.insert(records, false)
  end
  table.insert(lines, M.hint())
  table.insert(records, false)
  return lines, records
end

---@return integer|nil buf The status buffer if it exists.
local function find()
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.api.nvim_buf_get_name(buf) == NAME then
      return buf
    end
  end
end

---The record on the cursor line of `win`, if any.
---@param buf integer
---@param win integer
---@return loopr.LoopRecord|nil
local function record_at(buf, win)
  local records = vim.b[buf].loopr_records or {}
  local r = records[vim.api.nvim_win_get_cursor(win)[1]]
  return type(r) == 'table' and r or nil
end

---Make window `win` as high as `count` lines, within limits: at least MIN_HEIGHT, at most
---half the editor.
---@param win integer
---@param count integer
local function fit_height(win, count)
  local max = math.max(MIN_HEIGHT, math.floor((vim.o.lines - vim.o.cmdheight) / 2))
  local height = math.max(MIN_HEIGHT, math.min(count, max))
  local cmdheight = vim.o.cmdheight
  pcall(vim.api.nvim_win_set_height, win, height)
  if vim.o.cmdheight ~= cmdheight then
    -- A window with none above or below it takes the height from the command line.
    vim.o.cmdheight = cmdheight
  end
  vim.w[win].loopr_height = vim.api.nvim_win_get_height(win)
end

---Replace the buffer's lines. Every window's cursor stays on the loop it was on, else on
---the same line.
---@param buf integer
---@param lines string[]
---@param records (loopr.LoopRecord|false)[]
local function render(buf, lines, records)
  local cursors = {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    local r = record_at(buf, win)
    cursors[win] = { pos = vim.api.nvim_win_get_cursor(win), id = r and r.id }
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  vim.b[buf].loopr_records = records
  vim.api.nvim_buf_clear_namespace(buf, NAMESPACE, 0, -1)
  for lnum, line in ipairs(lines) do
    local r = records[lnum]
    local group = (lnum == 1 and 'LooprStatusHeader')
      or (lnum == #lines and 'LooprStatusHint')
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

---@param root string
---@return string[]|nil lines
---@return (loopr.LoopRecord|false)[] records
---@return string|nil err
local function fetch(root)
  local rows, err = M.rows(root)
  if not rows then
    return nil, {}, err
  end
  local lines, records = M.format(rows)
  return lines, records
end

---The loop's current .md, as the host reports it.
---@param r loopr.LoopRecord
---@return string|nil
local function artifact_of(r)
  if type(r.artifact_path) == 'string' and r.artifact_path ~= '' then
    return r.artifact_path
  end
end

---@param r loopr.LoopRecord
---@return string
local function label(r)
  return ('%s %s'):format(r.type, type(r.name) == 'string' and r.name or r.id)
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

---Buffer-local keymaps acting on the loop under the cursor.
---@param buf integer
local function keymaps(buf)
  ---@param desc string
  ---@param lhs string
  ---@param action fun(r: loopr.LoopRecord, root: string)
  local function on_loop(lhs, desc, action)
    vim.keymap.set('n', lhs, function()
      local r = record_at(buf, vim.api.nvim_get_current_win())
      if not r then
        require('loopr.notify').notify('Loopr: no loop on this line', vim.log.levels.WARN)
        return
      end
      action(r, vim.b[buf].loopr_root or require('loopr.config').root())
    end, { buffer = buf, nowait = true, desc = desc })
  end
  on_loop('<CR>', "Loopr: open the loop's artifact", function(r)
    local path = artifact_of(r)
    if not path then
      require('loopr.notify').notify(('Loopr: %s has no artifact yet'):format(label(r)), vim.log.levels.INFO)
      return
    end
    -- Split the window the user came from rather than the short status window.
    local prev = vim.fn.win_getid(vim.fn.winnr('#'))
    if prev ~= 0 and vim.api.nvim_win_get_buf(prev) ~= buf and vim.api.nvim_win_get_config(prev).relative == '' then
      vim.api.nvim_set_current_win(prev)
    end
    local win = require('loopr.ui').open_artifact(path)
    if win then
      vim.api.nvim_set_current_win(win)
    end
  end)
  on_loop('t', "Loopr: follow this loop's transcript", function(r, root)
    -- Split the window the user came from rather than the short status window.
    local prev = vim.fn.win_getid(vim.fn.winnr('#'))
    if prev ~= 0 and vim.api.nvim_win_get_buf(prev) ~= buf and vim.api.nvim_win_get_config(prev).relative == '' then
      vim.api.nvim_set_current_win(prev)
    end
    require('loopr').transcript(r.id, { root = root })
  end)
  on_loop('a', 'Loopr: approve this loop', function(r, root)
    require('loopr').approve(r.id, { root = root }, function()
      M.refresh()
    end)
  end)
  on_loop('r', 'Loopr: revise this loop with feedback', function(r, root)
    vim.ui.input({ prompt = ('Revise %s: '):format(label(r)) }, function(feedback)
      if feedback and vim.trim(feedback) ~= '' then
        require('loopr').revise(feedback, { id = r.id, root = root }, function()
          M.refresh()
        end)
      end
    end)
  end)
  on_loop('x', 'Loopr: cancel this loop and its descendants', function(r, root)
    local below = cancellable_descendants(vim.b[buf].loopr_records or {}, r.id)
    if #below > 0 then
      local question = ('Cancel %s and its %d unfinished descendant loop(s)?'):format(label(r), #below)
      if vim.fn.confirm(question, '&Yes\n&No', 2) ~= 1 then
        return
      end
    end
    require('loopr').cancel(r.id, { root = root }, function()
      M.refresh()
    end)
  end)
  on_loop('R', 'Loopr: retry this loop', function(r, root)
    local loopr = require('loopr')
    if not loopr.retry then
      require('loopr.notify').notify('Loopr: this version cannot retry loops', vim.log.levels.WARN)
      return
    end
    loopr.retry(r.id, { root = root }, function()
      M.refresh()
    end)
  end)
  on_loop('K', "Loopr: show this loop's error in full", function(r)
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
  end)
  vim.keymap.set('n', 'q', function()
    if not pcall(vim.api.nvim_win_close, 0, false) then
      vim.api.nvim_buf_delete(buf, { force = true })
    end
  end, { buffer = buf, nowait = true, desc = 'Loopr: close the status window' })
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

---Refresh the status buffer if it is open; never moves the cursor or focus.
---@return boolean refreshed
function M.refresh()
  local buf = find()
  if not buf then
    return false
  end
  local lines, records, err = fetch(vim.b[buf].loopr_root or require('loopr.config').root())
  if not lines then
    lines, records = { 'Loopr: status unavailable: ' .. (err or '?'):gsub('\n', ' ') }, { false }
  end
  render(buf, lines, records)
  return true
end

---Open (or focus and refresh) the status buffer for the current project.
---@return integer|nil buf nil when the host could not answer (error notified).
function M.open()
  local root = require('loopr.config').root()
  local lines, records, err = fetch(root)
  if not lines then
    require('loopr.notify').notify(err or 'Loopr: status unavailable', vim.log.levels.ERROR)
    return nil
  end
  local buf = find() or create(root)
  vim.b[buf].loopr_root = root
  render(buf, lines, records)
  local win = vim.fn.win_findbuf(buf)[1]
  local here = win and vim.api.nvim_win_get_tabpage(win) == vim.api.nvim_get_current_tabpage()
  if here then
    vim.api.nvim_set_current_win(win)
  else
    win = vim.api.nvim_open_win(buf, true, { split = 'below', win = -1, height = MIN_HEIGHT })
  end
  fit_height(win, #lines)
  vim.wo[win].wrap = false
  return buf
end

return M

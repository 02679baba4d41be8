-- The `loopr://status` buffer: the project's loops as a tree, with keymaps acting on them.

local M = {}

local NAME = 'loopr://status'
local ERROR_WIDTH = 60
local NAME_WIDTH = 40
local INDENT = '  '

---@class loopr.LoopRecord
---@field id string
---@field type "plan"|"spec"|"phase"
---@field parent string|vim.NIL
---@field status string
---@field iteration integer
---@field tokens_in integer
---@field tokens_out integer
---@field error string|vim.NIL
---@field task string
---@field name string|vim.NIL
---@field triggered_by string|vim.NIL
---@field depends_on string[]
---@field review_passes integer
---@field created_at string
---@field updated_at string
---@field artifact_path string|vim.NIL Absolute path of the current .md.

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
---followed by its children in creation order, depth first.
---@param rows loopr.LoopRecord[] Newest first, as the host sends them.
---@return {record: loopr.LoopRecord, depth: integer}[]
function M.tree(rows)
  local known, children = {}, {}
  for _, r in ipairs(rows) do
    known[r.id] = true
  end
  for i = #rows, 1, -1 do
    local parent = parent_of(rows[i])
    if parent and known[parent] then
      children[parent] = children[parent] or {}
      table.insert(children[parent], rows[i])
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

---Format loop records as an aligned tree with a header line first.
---@param rows loopr.LoopRecord[] Newest first.
---@return string[] lines
---@return (loopr.LoopRecord|false)[] records The record of each line, false for others.
function M.format(rows)
  local cells = { { 'LOOP', 'NAME', 'ID', 'STATUS', 'ITER', 'REVIEWS', 'TOKENS IN/OUT', 'ERROR' } }
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
      text(r.tokens_in) .. '/' .. text(r.tokens_out),
      truncate(text(r.error), ERROR_WIDTH),
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

---@param root string
---@return string[]|nil lines
---@return (loopr.LoopRecord|false)[] records
---@return string|nil err
local function fetch(root)
  local rows, err = require('loopr.host').request('status', { root = root })
  if err then
    return nil, {}, err
  end
  local lines, records = M.format(type(rows) == 'table' and rows or {})
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
  on_loop('a', 'Loopr: approve this loop', function(r, root)
    require('loopr').approve(r.id, { root = root })
    M.refresh()
  end)
  on_loop('r', 'Loopr: revise this loop with feedback', function(r, root)
    vim.ui.input({ prompt = ('Revise %s: '):format(label(r)) }, function(feedback)
      if feedback and vim.trim(feedback) ~= '' then
        require('loopr').revise(feedback, { id = r.id, root = root })
        M.refresh()
      end
    end)
  end)
  on_loop('x', 'Loopr: cancel this loop and its descendants', function(r, root)
    require('loopr').cancel(r.id, { root = root })
    M.refresh()
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
    local height = math.min(math.max(#lines, 3), 15)
    vim.api.nvim_open_win(buf, true, { split = 'below', win = -1, height = height })
  end
  vim.wo.wrap = false
  return buf
end

return M

-- The `loopr://status` buffer listing the project's loops.

local M = {}

local NAME = 'loopr://status'
local ERROR_WIDTH = 60

---@class loopr.LoopRecord
---@field id string
---@field type string
---@field parent string|vim.NIL
---@field status string
---@field iteration integer
---@field tokens_in integer
---@field tokens_out integer
---@field error string|vim.NIL
---@field task string
---@field created_at string
---@field updated_at string

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

---Format loop records as aligned lines with a header line first.
---@param rows loopr.LoopRecord[]
---@return string[]
function M.format(rows)
  local cells = { { 'ID', 'TYPE', 'STATUS', 'ITER', 'TOKENS IN/OUT', 'ERROR' } }
  for _, r in ipairs(rows) do
    table.insert(cells, {
      text(r.id),
      text(r.type),
      text(r.status),
      text(r.iteration),
      text(r.tokens_in) .. '/' .. text(r.tokens_out),
      truncate(text(r.error), ERROR_WIDTH),
    })
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
  end
  return lines
end

---@return integer|nil buf The status buffer if it exists.
local function find()
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.api.nvim_buf_get_name(buf) == NAME then
      return buf
    end
  end
end

---Replace the buffer's lines, keeping every window's cursor where it was.
---@param buf integer
---@param lines string[]
local function render(buf, lines)
  local cursors = {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    cursors[win] = vim.api.nvim_win_get_cursor(win)
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  for win, pos in pairs(cursors) do
    local row = math.min(pos[1], #lines)
    pcall(vim.api.nvim_win_set_cursor, win, { row, pos[2] })
  end
end

---@param root string
---@return string[]|nil lines
---@return string|nil err
local function fetch(root)
  local rows, err = require('loopr.host').request('status', { root = root })
  if err then
    return nil, err
  end
  return M.format(type(rows) == 'table' and rows or {})
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
  vim.keymap.set('n', 'q', function()
    if not pcall(vim.api.nvim_win_close, 0, false) then
      vim.api.nvim_buf_delete(buf, { force = true })
    end
  end, { buffer = buf, nowait = true, desc = 'Close Loopr status' })
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
  local lines, err = fetch(vim.b[buf].loopr_root or require('loopr.config').root())
  if not lines then
    lines = { 'Loopr: status unavailable: ' .. (err or '?'):gsub('\n', ' ') }
  end
  render(buf, lines)
  return true
end

---Open (or focus and refresh) the status buffer for the current project.
---@return integer|nil buf nil when the host could not answer (error notified).
function M.open()
  local root = require('loopr.config').root()
  local lines, err = fetch(root)
  if not lines then
    vim.notify(err or 'Loopr: status unavailable', vim.log.levels.ERROR)
    return nil
  end
  local buf = find() or create(root)
  vim.b[buf].loopr_root = root
  render(buf, lines)
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

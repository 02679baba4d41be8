-- The status buffer's table: the project's loops as a tree, one aligned row each, fitted to
-- the width of the window that shows it.

local M = {}

local ERROR_WIDTH = 60
local NAME_WIDTH = 40
local INDENT = '  '

---@param s string
---@param width integer
---@return string
local function truncate(s, width)
  -- Cut by the cells a character takes on screen, as the columns are measured.
  return require('loopr.notify').fit((s:gsub('%s+', ' ')), width)
end

---@param v any
---@return string
function M.text(v)
  if v == nil or v == vim.NIL then
    return ''
  end
  return tostring(v)
end

---@param r loopr.LoopRecord
---@return string|nil
function M.parent_of(r)
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
      local parent = M.parent_of(rows[i])
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
    local parent = M.parent_of(r)
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

---A cell showing field `name` of the record.
---@param name string
---@return fun(r: loopr.LoopRecord): string
local function field(name)
  return function(r)
    return M.text(r[name])
  end
end

---The table's columns, in order: each one's header and cell (`cap`: cut to that many
---characters before any fitting; `K` shows an error in full).
---@type {title: string, cap?: integer, cell: fun(r: loopr.LoopRecord, depth: integer): string}[]
local COLUMNS = {
  {
    title = 'LOOP',
    cell = function(r, depth)
      return INDENT:rep(depth) .. M.text(r.type)
    end,
  },
  {
    title = 'NAME',
    cap = NAME_WIDTH,
    cell = function(r)
      return r.type == 'plan' and M.text(r.task) or M.text(r.name)
    end,
  },
  { title = 'ID', cell = field('id') },
  -- The host names the state as the user sees it (`undone` for an undone code loop).
  { title = 'STATUS', cell = field('shown_status') },
  { title = 'ITER', cell = field('iteration') },
  { title = 'REVIEWS', cell = field('review_passes') },
  {
    title = 'TOKENS',
    cell = function(r)
      return M.tokens(r.spend)
    end,
  },
  {
    title = 'COST',
    cell = function(r)
      return M.cost(r.spend)
    end,
  },
  {
    title = 'TREE TOTAL',
    cell = function(r)
      return M.tree_spend(r.tree)
    end,
  },
  {
    title = 'ERROR',
    cap = ERROR_WIDTH,
    -- The host tells a note (what an undo restored) from an error: a note has its own column.
    -- A pending loop has no error; what it waits for shows here.
    cell = function(r)
      if M.text(r.note) ~= '' then
        return ''
      end
      return M.text(r.error) ~= '' and M.text(r.error) or M.text(r.waits_for)
    end,
  },
  {
    title = 'NOTE',
    cap = ERROR_WIDTH,
    -- What an undo restored; else, as the host words them, where a run of a plan or spec
    -- stands (`run: phase 3 of 7 ...`) and a spec's requirements verified (`requirements 5/6
    -- verified`) or a phase's latest verification and its findings.
    cell = function(r)
      if M.text(r.note) ~= '' then
        return M.text(r.note)
      end
      local parts = {}
      for _, text in ipairs({ M.text(r.run), type(r.coverage) == 'table' and M.text(r.coverage.text) or '' }) do
        if text ~= '' then
          table.insert(parts, text)
        end
      end
      return table.concat(parts, '; ')
    end,
  },
}

---How the table fits a window too narrow for it, one step at a time until it fits: the
---columns a user needs least go first, or shrink to `to` cells; the name is cut last.
---LOOP and STATUS always stay.
---@type {column: string, to?: integer}[]
local NARROWING = {
  { column = 'TREE TOTAL' },
  { column = 'TOKENS' },
  { column = 'REVIEWS' },
  { column = 'ITER' },
  { column = 'COST' },
  { column = 'NOTE' },
  { column = 'ERROR', to = 30 },
  { column = 'ID' },
  { column = 'ERROR', to = 12 },
  { column = 'NAME', to = 12 },
}

---Column widths that fit `width` display cells (0: the column is left out).
---@param widths integer[] Each column's widest cell.
---@param width number
---@return integer[]
local function narrowed(natural, width)
  local widths = vim.deepcopy(natural)
  local function total()
    local sum, shown = 0, 0
    for _, w in ipairs(widths) do
      if w > 0 then
        sum, shown = sum + w, shown + 1
      end
    end
    return sum + 2 * math.max(shown - 1, 0)
  end
  for _, step in ipairs(NARROWING) do
    local excess = total() - width
    if excess <= 0 then
      break
    end
    for i, column in ipairs(COLUMNS) do
      if column.title == step.column then
        widths[i] = step.to and math.min(widths[i], math.max(step.to, widths[i] - excess)) or 0
      end
    end
  end
  -- A column left out may leave room for more of one that was cut.
  for i = #widths, 1, -1 do
    if widths[i] > 0 then
      widths[i] = math.min(natural[i], widths[i] + math.max(width - total(), 0))
    end
  end
  return widths
end

---Format loop records as an aligned tree under a header line, fitted to `width` display
---cells (see NARROWING).
---@param rows loopr.LoopRecord[] Newest first.
---@param width? number Default: no limit.
---@return string[] lines
---@return (loopr.LoopRecord|false)[] records The record of each line, false for others.
function M.format(rows, width)
  local cells, records = { {} }, { false }
  for i, column in ipairs(COLUMNS) do
    cells[1][i] = column.title
  end
  for _, node in ipairs(M.tree(rows)) do
    local row = {}
    for i, column in ipairs(COLUMNS) do
      local cell = column.cell(node.record, node.depth)
      row[i] = column.cap and truncate(cell, column.cap) or cell
    end
    table.insert(cells, row)
    table.insert(records, node.record)
  end
  local widths = {}
  for _, row in ipairs(cells) do
    for i, cell in ipairs(row) do
      widths[i] = math.max(widths[i] or 0, vim.fn.strdisplaywidth(cell))
    end
  end
  widths = narrowed(widths, width or math.huge)
  local lines = {}
  for _, row in ipairs(cells) do
    local parts = {}
    for i, cell in ipairs(row) do
      if widths[i] > 0 then
        -- (Only what is too wide: a cut closes up spaces, the tree's indent among them.)
        cell = vim.fn.strdisplaywidth(cell) > widths[i] and truncate(cell, widths[i]) or cell
        table.insert(parts, cell .. string.rep(' ', widths[i] - vim.fn.strdisplaywidth(cell)))
      end
    end
    table.insert(lines, (table.concat(parts, '  '):gsub('%s+$', '')))
  end
  if #rows == 0 then
    table.insert(lines, '(no loops yet; start one with :LooprPlan {task})')
    table.insert(records, false)
  end
  return lines, records
end

return M

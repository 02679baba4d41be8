-- Phase tasks as a quickfix list (`:LooprTasks`).

local M = {}

local ALL = 'Loopr: tasks (all phases)'

---@param v any
---@return table
local function list(v)
  return type(v) == 'table' and v or {}
end

---Quickfix items and the list's title for a `tasks` reply. Each entry names its phase; the
---title names the phase asked for, else the plan the host picked when there are several.
---@param reply loopr.TasksReply|any
---@param single boolean One phase was asked for (by name or by its buffer).
---@return vim.quickfix.entry[] items
---@return string title
function M.convert(reply, single)
  local phases = list(type(reply) == 'table' and reply.phases)
  local items = {}
  for _, phase in ipairs(phases) do
    local name = type(phase) == 'table' and type(phase.name) == 'string' and phase.name or nil
    for _, item in ipairs(list(type(phase) == 'table' and phase.items)) do
      local location = list(item.location)
      local start = list(list(location.range).start)
      if type(location.uri) == 'string' then
        local text = type(item.text) == 'string' and item.text or ''
        table.insert(items, {
          filename = vim.uri_to_fname(location.uri),
          lnum = (tonumber(start.line) or 0) + 1,
          col = (tonumber(start.character) or 0) + 1,
          text = name and ('[%s] %s'):format(name, text) or text,
          user_data = item.user_data,
          valid = 1,
        })
      end
    end
  end
  local name = #phases == 1 and type(phases[1]) == 'table' and phases[1].name
  local plan = type(reply) == 'table' and reply.plan
  local title = ALL
  if single and type(name) == 'string' then
    title = 'Loopr: tasks ' .. name
  elseif type(plan) == 'string' then
    title = 'Loopr: tasks of ' .. plan
  end
  return items, title
end

---Replace the list titled `title` in place (the current list stays current), else push
---a new list after the current one so `:colder` returns to the previous list.
---@param items vim.quickfix.entry[]
---@param title string
---@param phase? string The one phase the list shows, for commands run from it.
---@return integer qf_id
function M.apply(items, title, phase)
  local context = phase and { loopr = { kind = 'tasks', phase = phase } } or nil
  return require('loopr.qf').set({ title = title, items = items, context = context })
end

---Fetch tasks from the host and show them in the quickfix window.
---@param phase string|nil A phase name; nil: the current phase.md buffer's phase, else the
---plan of the current artifact buffer, else the newest plan with phases.
---@param root string Project root.
---@return integer|nil qf_id nil on error or when there are no tasks (notified).
function M.open(phase, root)
  local params = { root = root, phase = phase }
  local here = not phase and require('loopr.paths').buf_artifact() or nil
  -- A phase.md names its phase; a plan.md or spec.md its plan, which the host finds.
  params.loop_id = here and here.loop_id or nil
  local single = phase ~= nil or (here ~= nil and here.kind == 'phase')
  local reply, err = require('loopr.host').request('tasks', params)
  if err then
    require('loopr.notify').notify(err, vim.log.levels.ERROR)
    return nil
  end
  local items, title = M.convert(reply, single)
  if #items == 0 then
    local what = phase and ('phase ' .. phase)
      or (here and here.kind == 'phase' and ('phase loop ' .. here.loop_id))
      or (here and ('the plan of this ' .. here.kind))
      or 'any phase'
    require('loopr.notify').notify(('Loopr: no tasks for %s yet'):format(what), vim.log.levels.WARN)
    return nil
  end
  local id = M.apply(items, title, single and (phase or params.loop_id) or nil)
  vim.cmd('botright copen')
  return id
end

return M

-- Events pushed by the host via
-- `nvim_exec_lua("return require('loopr.events').dispatch(...)", {event})`.

local notify = require('loopr.notify')

local M = {}

---@param pattern string
---@param data table
local function fire(pattern, data)
  vim.api.nvim_exec_autocmds('User', { pattern = pattern, data = data, modeline = false })
end

---@param v any
---@return string|nil
local function str(v)
  return type(v) == 'string' and v ~= '' and v or nil
end

---The status row of the event's loop, nil when the host does not find it. Asked of the
---loop's own project (the event says which), whichever project the current buffer belongs
---to; at once, so the message is shown before what the next event says.
---@param ev loopr.LoopUpdatedEvent
---@return loopr.LoopRecord|nil
local function row_of(ev)
  local root = str(ev.root)
  if not root then
    return nil
  end
  local rows = require('loopr.host').request('status', { root = root })
  for _, r in ipairs(type(rows) == 'table' and rows or {}) do
    if r.id == ev.id then
      return r
    end
  end
end

---How the host names a loop (`plan "{task}"`, `spec "{name}"`), else its type and id.
---@param ev loopr.LoopUpdatedEvent
---@param row loopr.LoopRecord|nil
---@return string
local function name_of(ev, row)
  return row and str(row.label) or (ev.type or 'loop') .. ' ' .. ev.id
end

---@type table<string, fun(ev: table)>
local handlers = {}

---The last status each loop's events said, by loop id: a status the host says again (a
---resume, a re-emitted event) is not news.
---@type table<string, string>
local last_status = {}

---@param ev loopr.LoopUpdatedEvent
function handlers.loop_updated(ev)
  local progress = require('loopr.progress')
  if ev.idle then
    progress.clear(ev.id)
    -- What the command line showed of it is over: another loop's latest line replaces it.
    local latest = progress.latest()
    if latest and require('loopr.config').get().progress then
      notify.progress(latest)
    end
  elseif ev.status == 'running' then
    -- Visible in statuslines before the loop's first progress message.
    progress.touch(ev.id, ('%s running'):format(ev.type or 'loop'))
  end
  -- An undone or rewound loop keeps its status; its note says so, and `:LooprUndo` or
  -- `:LooprRewind` reported it already.
  if ev.status == 'failed' and not ev.undone and not ev.rewound then
    -- The loop by name, why, and (kept whole on the command line) what to do next.
    local row = row_of(ev)
    local way_on = row and str(row.way_on)
    notify.notify(
      ('Loopr: %s failed: %s'):format(name_of(ev, row), str(ev.error) or 'unknown error'),
      vim.log.levels.ERROR,
      { keep = way_on and ('; ' .. way_on) }
    )
  end
  local was = last_status[ev.id]
  last_status[ev.id] = ev.status
  if ev.status == 'awaiting_approval' then
    local row = row_of(ev)
    notify.notify(
      ('Loopr: %s awaits review: :LooprApprove or :LooprRevise {feedback}'):format(name_of(ev, row)),
      vim.log.levels.INFO
    )
    -- A code loop the "code" gate holds: its changes are what the user reviews, listed
    -- once as it comes to wait (a list the user closed stays closed), named by its phase.
    if ev.type == 'code' and was ~= 'awaiting_approval' then
      local phase = row and str(row.name) or ev.id
      require('loopr.changes').open(phase, str(ev.root) or require('loopr.config').root())
    end
  end
  fire('LooprLoopUpdated', { id = ev.id, type = ev.type, status = ev.status })
end

---@param ev loopr.ProgressEvent
function handlers.progress(ev)
  local message = str(ev.message) or ''
  require('loopr.progress').set(ev.loop_id, message)
  if require('loopr.config').get().progress then
    notify.progress(message)
  end
  fire('LooprProgress', { loop_id = ev.loop_id, message = message, tokens = tonumber(ev.tokens) })
end

---@param ev loopr.ArtifactCreatedEvent
function handlers.artifact_created(ev)
  -- Only artifacts that wait for review (as the loop's stored settings say) open, and plans,
  -- which the user always gets to read; ungated specs and phases flow on, except that a
  -- revision replaces the older iteration where a window shows it.
  local ui = require('loopr.ui')
  if ev.gated or ev.kind == 'plan' then
    ui.open_artifact(ev.path, require('loopr.config').get().layout)
  else
    ui.replace_older(ev.path)
  end
  fire('LooprArtifactCreated', {
    loop_id = ev.loop_id,
    kind = ev.kind,
    path = ev.path,
    json_path = ev.json_path,
    iteration = ev.iteration,
  })
end

---@param ev loopr.TasksUpdatedEvent
function handlers.tasks_updated(ev)
  local path = str(ev.path)
  if path then
    -- Ticked in place on disk: an open phase.md shows it without the user doing anything.
    require('loopr.edits').reload_unmodified(path)
  end
  fire('LooprTasksUpdated', { loop_id = ev.loop_id, path = path, done = ev.done })
end

---@param ev loopr.ApprovalRequestedEvent
function handlers.approval_requested(ev)
  local req = require('loopr.approvals').request(ev)
  fire('LooprApprovalRequested', {
    id = req.id,
    loop_id = req.loop_id,
    kind = req.kind,
    tool = req.tool,
    subject = req.subject,
  })
end

---@param ev loopr.ApprovalClosedEvent
function handlers.approval_closed(ev)
  require('loopr.approvals').close(tonumber(ev.id) or -1)
end

---@param ev loopr.ValidationEvent
function handlers.validation(ev)
  local phase = str(ev.phase) or ev.loop_id
  -- Parsed like `:make` output; the list is not opened, so nothing takes focus.
  require('loopr.qf').set_validation(
    ('Loopr: %s validation'):format(phase),
    type(ev.output) == 'string' and ev.output or '',
    ev.locations
  )
  if ev.passed == true then
    notify.notify(('Loopr: %s validation passed (iteration %s)'):format(phase, ev.iteration), vim.log.levels.INFO)
  else
    notify.notify(
      ('Loopr: %s validation failed (iteration %s); see :copen'):format(phase, ev.iteration),
      vim.log.levels.WARN
    )
  end
  fire('LooprValidation', { loop_id = ev.loop_id, phase = phase, iteration = ev.iteration, passed = ev.passed })
end

---@param ev loopr.VerificationEvent
function handlers.verification(ev)
  local label = str(ev.label) or ev.loop_id
  -- Filled in place; the list is not opened, so nothing takes focus.
  require('loopr.qf').set_verification(label, ev.items or {})
  notify.notify(str(ev.message) or '', ev.blocking == true and vim.log.levels.WARN or vim.log.levels.INFO)
  fire('LooprVerification', { loop_id = ev.loop_id, label = label, round = ev.round, blocking = ev.blocking })
end

---@param ev loopr.AgentPlanEvent
function handlers.agent_plan(ev)
  local phase = str(ev.phase) or ev.loop_id
  require('loopr.qf').set_agent_plan(('Loopr: %s agent todo'):format(phase), ev.items or {})
  fire('LooprAgentPlan', { loop_id = ev.loop_id, phase = phase })
end

---@param ev loopr.NoticeEvent
function handlers.notice(ev)
  local levels = { info = vim.log.levels.INFO, warn = vim.log.levels.WARN, error = vim.log.levels.ERROR }
  local message = 'Loopr: ' .. (str(ev.message) or '')
  notify.notify(message, levels[ev.level] or vim.log.levels.WARN)
  fire('LooprNotice', { loop_id = ev.loop_id, level = ev.level, message = message })
end

---@param ev loopr.ReadyEvent
function handlers.ready(ev)
  local message = str(ev.message) or ''
  require('loopr.progress').ready(message)
  -- On the command line in place of the last loop's progress (a recent warning or error
  -- stays), and in statuslines until a loop runs again.
  if require('loopr.config').get().progress then
    notify.progress(message)
  end
  fire('LooprReady', { root = ev.root, message = message })
end

---Entry point for host notifications; returns at once and handles the event later.
---@param event loopr.Event
---@return nil
function M.dispatch(event)
  vim.schedule(function()
    local handler = type(event) == 'table' and handlers[event.event]
    if not handler then
      return
    end
    local ok, err = pcall(handler, event)
    if not ok then
      notify.notify(('Loopr: error handling %s event: %s'):format(event.event, err), vim.log.levels.ERROR)
    end
  end)
  return nil
end

return M

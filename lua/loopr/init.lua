-- Public Lua API of Loopr; each user command calls one function here.

local config = require('loopr.config')

local M = {}

---@param msg string
---@param level? integer
local function notify(msg, level)
  require('loopr.notify').notify(msg, level or vim.log.levels.ERROR)
end

---Send a request whose reply names a loop; notify and return nil on any error.
---@param method string
---@param params table
---@return string|nil loop_id
local function request_loop_id(method, params)
  local result, err = require('loopr.host').request(method, params)
  if err then
    notify(err)
    return nil
  end
  local id = type(result) == 'table' and result.loop_id or nil
  if type(id) ~= 'string' then
    notify(('Loopr: unexpected reply to %s: %s'):format(method, vim.inspect(result)))
    return nil
  end
  return id
end

---Configure Loopr. Invalid options are reported as an error notification naming the option
---and what it expects (no Lua error); the options stored before stay in effect.
---@param opts loopr.Opts|nil
---@return boolean ok
function M.setup(opts)
  if vim.fn.has('nvim-0.10') ~= 1 then
    vim.notify('Loopr: Neovim >= 0.10 is required', vim.log.levels.ERROR)
    return false
  end
  local ok, err = config.setup(opts)
  if not ok then
    notify(err or 'Loopr: invalid options')
    return false
  end
  return true
end

---Start a plan loop for `task` in the current project.
---@param task string
---@return string|nil loop_id nil on error (already notified).
function M.plan(task)
  task = vim.trim(task or '')
  if task == '' then
    notify('LooprPlan needs a task, e.g. :LooprPlan Add a --version flag')
    return nil
  end
  local id = request_loop_id('plan', {
    task = task,
    root = config.root(),
    settings = config.settings(),
  })
  if not id then
    return nil
  end
  notify(('Loopr: planning (loop %s)'):format(id), vim.log.levels.INFO)
  return id
end

---Open the transcript of loop `id` (default: the loop of the artifact in the current buffer,
---else the newest running loop) and follow it live.
---@param id string|nil
---@param opts? loopr.TargetOpts
---@return integer|nil buf nil on error (already notified).
function M.transcript(id, opts)
  return require('loopr.transcript').open(id, opts)
end

---Open or refresh the status buffer.
---@return integer|nil buf
function M.status()
  return require('loopr.status').open()
end

---@class loopr.TargetOpts
---@field root? string Project root; default: the current project (`config.root()`).

---@class loopr.ReviseOpts: loopr.TargetOpts
---@field id? string Loop to revise; default: the current artifact buffer's.

---@param id string|nil
---@return string|nil
local function trimmed(id)
  id = id and vim.trim(id) or nil
  return (id ~= '' and id) or nil
end

---The record of loop `id` in `root`, or nil.
---@param root string
---@param id string
---@return loopr.LoopRecord|nil
local function record_of(root, id)
  local rows = require('loopr.host').request('status', { root = root })
  for _, r in ipairs(type(rows) == 'table' and rows or {}) do
    if r.id == id then
      return r
    end
  end
end

---Cancel loop `id` and its descendants, or the newest running loop when `id` is nil or empty.
---@param id string|nil
---@param opts? loopr.TargetOpts
---@return string|nil loop_id The cancelled loop, nil on error (already notified).
function M.cancel(id, opts)
  id = trimmed(id)
  local cancelled = request_loop_id('cancel', {
    root = (opts and opts.root) or config.root(),
    id = id,
  })
  if not cancelled then
    return nil
  end
  notify(('Loopr: cancelling loop %s'):format(cancelled), vim.log.levels.INFO)
  return cancelled
end

---Approve loop `id` so its children start. Without `id`: the loop of the current artifact
---buffer if it awaits approval, else the newest loop awaiting approval.
---@param id string|nil
---@param opts? loopr.TargetOpts
---@return string|nil loop_id The approved loop, nil on error (already notified).
function M.approve(id, opts)
  local root = (opts and opts.root) or config.root()
  id = trimmed(id)
  if not id then
    local here = require('loopr.paths').buf_artifact()
    local r = here and record_of(root, here.loop_id)
    id = (r and r.status == 'awaiting_approval') and r.id or nil
  end
  local approved = request_loop_id('approve', { root = root, id = id })
  if not approved then
    return nil
  end
  local r = record_of(root, approved)
  notify(('Loopr: approved %s %s'):format(r and r.type or 'loop', approved), vim.log.levels.INFO)
  return approved
end

---Re-run a loop with `feedback`; its descendants become invalidated. The loop is `opts.id`,
---else the one whose artifact is in the current buffer.
---@param feedback string
---@param opts? loopr.ReviseOpts
---@return string|nil loop_id The revised loop, nil on error (already notified).
function M.revise(feedback, opts)
  opts = opts or {}
  feedback = vim.trim(feedback or '')
  local id = trimmed(opts.id)
  if not id then
    local here = require('loopr.paths').buf_artifact()
    if not here then
      notify('LooprRevise works in an artifact buffer (plan.md, spec.md or phase.md); open one from :LooprStatus')
      return nil
    end
    id = here.loop_id
  end
  if feedback == '' then
    notify('LooprRevise needs feedback, e.g. :LooprRevise Split the second spec in two')
    return nil
  end
  local revised = request_loop_id('revise', {
    root = opts.root or config.root(),
    id = id,
    feedback = feedback,
  })
  if not revised then
    return nil
  end
  notify(('Loopr: revising loop %s'):format(revised), vim.log.levels.INFO)
  return revised
end

---Run a loop that failed, was cancelled or was interrupted again (|:LooprRetry|): loop `id`,
---else the loop of the current artifact buffer, else the newest such loop.
---@param id string|nil
---@param opts? loopr.TargetOpts
---@return string|nil loop_id The loop retried, nil on error (already notified).
function M.retry(id, opts)
  id = trimmed(id)
  if not id then
    local here = require('loopr.paths').buf_artifact()
    id = here and here.loop_id or nil
  end
  local retried = request_loop_id('retry', { root = (opts and opts.root) or config.root(), id = id })
  if not retried then
    return nil
  end
  notify(('Loopr: retrying loop %s'):format(retried), vim.log.levels.INFO)
  return retried
end

---Put the tasks of phases in a quickfix list (|:LooprTasks|): of phase `phase` (a name),
---else of the current buffer's phase artifact, else of every current phase.
---@param phase string|nil
---@return integer|nil qf_id The quickfix list's id, nil on error or without tasks (notified).
function M.tasks(phase)
  return require('loopr.tasks').open(trimmed(phase), config.root())
end

---Implement a phase with a code loop (|:LooprRun|): phase `phase` (a name or a phase loop
---id), else the phase whose `phase.md` is in the current buffer. Changes wait for approval
---per the `approvals` option.
---@param phase string|nil
---@return string|nil loop_id The code loop, nil on error (already notified).
function M.run(phase)
  local root = config.root()
  local target, label = trimmed(phase), trimmed(phase)
  if not target then
    local here = require('loopr.paths').buf_artifact()
    if here and here.kind == 'phase' then
      local r = record_of(root, here.loop_id)
      target, label = here.loop_id, (r and type(r.name) == 'string') and r.name or here.loop_id
    end
  end
  if not target then
    notify('LooprRun needs a phase: :LooprRun {phase} (see :LooprStatus)')
    return nil
  end
  local id = request_loop_id('run', {
    root = root,
    phase = target,
    settings = config.settings(),
  })
  if not id then
    return nil
  end
  notify(('Loopr: implementing %s (loop %s)'):format(label, id), vim.log.levels.INFO)
  return id
end

---The phase a command is about: the argument, else the phase.md in the current buffer.
---@param phase string|nil
---@param command string For the error message.
---@return string|nil phase
local function phase_argument(phase, command)
  local target = trimmed(phase)
  if not target then
    local here = require('loopr.paths').buf_artifact()
    if here and here.kind == 'phase' then
      target = here.loop_id
    end
  end
  if not target then
    notify(('%s needs a phase: :%s {phase} (see :LooprStatus)'):format(command, command))
  end
  return target
end

---Show what the newest code loop of `phase` changed, one quickfix entry per hunk
---(`:LooprChanges`).
---@param phase string|nil Phase name; default: the phase of the current phase.md buffer.
---@return integer|nil qf_id
function M.changes(phase)
  local target = phase_argument(phase, 'LooprChanges')
  return target and require('loopr.changes').open(target, config.root()) or nil
end

---Undo what the newest code loop of `phase` changed (`:LooprUndo`, `:LooprUndo!`).
---@param phase string|nil Phase name; default: the phase of the current phase.md buffer.
---@param force? boolean Also restore files changed since the loop changed them.
---@return loopr.UndoReply|nil
function M.undo(phase, force)
  local target = phase_argument(phase, 'LooprUndo')
  return target and require('loopr.changes').undo(target, config.root(), force) or nil
end

---Ask the host to resume loops left unfinished by a host that died, when this project has
---Loopr state. The host itself answers whether it has (`loopr has-state`, run in the
---background so startup never waits); without state no host is started. Silent when there
---is nothing to resume.
---@param on_done? fun(active: integer|nil) Called when done with the number of active loops,
---nil when the host was not asked or on error.
function M.resume_if_needed(on_done)
  on_done = on_done or function() end
  local root = config.root()
  local host = require('loopr.host')
  local bin = host.resolve_bin()
  if not bin then
    -- Nothing can resume without the host; the first command reports how to build it.
    on_done(nil)
    return
  end
  local function resume(result)
    if result.code ~= 0 then
      if result.code ~= 1 then
        local detail = vim.trim(result.stderr or '')
        notify(('Loopr: cannot check for loops to resume: %s'):format(detail), vim.log.levels.WARN)
      end
      return nil
    end
    local count, err = host.request('resume', { root = root })
    if err then
      notify(err, vim.log.levels.WARN)
      return nil
    end
    if type(count) == 'number' and count > 0 then
      notify(('Loopr: resuming %d loop(s)'):format(count), vim.log.levels.INFO)
    end
    return type(count) == 'number' and count or nil
  end
  local ok, err = pcall(vim.system, { bin, 'has-state', '--root', root }, { text = true }, function(result)
    vim.schedule(function()
      on_done(resume(result))
    end)
  end)
  if not ok then
    notify(('Loopr: cannot check for loops to resume: %s'):format(err), vim.log.levels.WARN)
    on_done(nil)
  end
end

---Open the host's log file in a split.
---@return integer|nil buf
function M.open_log()
  local file = require('loopr.host').log_file()
  if not vim.uv.fs_stat(file) then
    notify(('Loopr: no log file yet at %s'):format(file), vim.log.levels.WARN)
    return nil
  end
  vim.cmd(('split %s'):format(vim.fn.fnameescape(file)))
  vim.bo.autoread = true
  vim.cmd('normal! G')
  return vim.api.nvim_get_current_buf()
end

---Statusline component: latest progress message, "" when nothing runs.
---@return string
function M.progress()
  return require('loopr.progress').get()
end

---@param items string[]
---@param arglead string|nil
---@return string[]
local function starting_with(items, arglead)
  return vim.tbl_filter(function(item)
    return type(item) == 'string' and vim.startswith(item, arglead or '')
  end, items)
end

---Complete ids of running loops (for `:LooprCancel`).
---@param arglead string
---@return string[]
function M.complete_loop_ids(arglead)
  local ids = require('loopr.host').request('loop_ids', { root = config.root(), running_only = true })
  return starting_with(type(ids) == 'table' and ids or {}, arglead)
end

---Complete the ids of every loop of the project (for `:LooprTranscript`).
---@param arglead string
---@return string[]
function M.complete_all_loop_ids(arglead)
  local ids = require('loopr.host').request('loop_ids', { root = config.root() })
  return starting_with(type(ids) == 'table' and ids or {}, arglead)
end

---Complete ids of loops awaiting approval (for `:LooprApprove`).
---@param arglead string
---@return string[]
function M.complete_awaiting_ids(arglead)
  local ids = require('loopr.host').request('loop_ids', { root = config.root(), awaiting_only = true })
  return starting_with(type(ids) == 'table' and ids or {}, arglead)
end

---Complete names of current (not invalidated) phases (for `:LooprTasks`, `:LooprRun`,
---`:LooprChanges`, `:LooprUndo`), as the host names them: `spec/phase` where two specs have a
---phase of the same name.
---@param arglead string
---@return string[]
function M.complete_phase_names(arglead)
  local names = require('loopr.host').request('phase_names', { root = config.root() })
  return starting_with(type(names) == 'table' and names or {}, arglead)
end

---Complete ids of loops that can be retried (for `:LooprRetry`).
---@param arglead string
---@return string[]
function M.complete_retryable_ids(arglead)
  local rows = require('loopr.host').request('status', { root = config.root() })
  local ids = {}
  for _, r in ipairs(type(rows) == 'table' and rows or {}) do
    if r.status == 'failed' or r.status == 'cancelled' or r.status == 'interrupted' then
      table.insert(ids, r.id)
    end
  end
  return starting_with(ids, arglead)
end

return M

-- Public Lua API of Loopr; each user command calls one function here.

local config = require('loopr.config')

local M = {}

---@param msg string
---@param level? integer
local function notify(msg, level)
  require('loopr.notify').notify(msg, level or vim.log.levels.ERROR)
end

---Send a request whose reply names a loop, without waiting for it. On the reply, `on_loop_id`
---gets the id; an error is notified. `on_done` (the caller's) gets the id, nil on error, last.
---@param method string
---@param params table
---@param on_loop_id fun(loop_id: string, label: string) `label` names the loop: `plan "{task}"`.
---@param on_done? fun(loop_id: string|nil)
local function send_for_loop_id(method, params, on_loop_id, on_done)
  on_done = on_done or function() end
  require('loopr.host').send(method, params, function(result, err)
    if err then
      notify(err)
      return on_done(nil)
    end
    local id = type(result) == 'table' and result.loop_id or nil
    if type(id) ~= 'string' then
      notify(('Loopr: unexpected reply to %s: %s'):format(method, vim.inspect(result)))
      return on_done(nil)
    end
    -- The host names the loop (its task or name); the id stays for the callers.
    on_loop_id(id, type(result.label) == 'string' and result.label or ('loop ' .. id))
    on_done(id)
  end)
end

---A function that asks the host to `method` a loop (its id, or nil for the host's default) in
---project `root` and notifies `done` (a format for the loop's label) on its reply.
---@param method string
---@param root string
---@param done string e.g. 'Loopr: cancelling %s'
---@param on_done fun(loop_id: string|nil)
---@return fun(target: string|nil)
local function loop_request(method, root, done, on_done)
  return function(target)
    send_for_loop_id(method, { root = root, id = target }, function(_, label)
      notify(done:format(label), vim.log.levels.INFO)
    end, on_done)
  end
end

---Configure Loopr. The valid options apply; each invalid one is reported as an error
---notification naming it and what it expects, or the closest valid name (no Lua error), and
---leaves what was in effect.
---@param opts loopr.Opts|nil
---@return boolean ok
function M.setup(opts)
  if vim.fn.has('nvim-0.10') ~= 1 then
    vim.notify('Loopr: Neovim >= 0.10 is required', vim.log.levels.ERROR)
    return false
  end
  local ok, _, report = config.setup(opts)
  for _, message in ipairs(report) do
    notify(message)
  end
  if not ok and type(opts) ~= 'table' then
    return false
  end
  -- A running host holds plan trees to the new budget at once (paused trees it allows go
  -- on); a host not loaded yet cannot be running, and gets it with its first request.
  local host = package.loaded['loopr.host']
  if host then
    host.budget_changed()
  end
  return ok
end

---Start a plan loop for `task` in the current project. Returns at once; the loop's id is
---announced when the host has recorded the loop.
---@param task string
---@param on_done? fun(loop_id: string|nil) Called with the new loop's id, nil on error (already notified).
---@return boolean sent false when refused before asking the host (already notified).
function M.plan(task, on_done)
  task = vim.trim(task or '')
  if task == '' then
    notify('usage: :LooprPlan {task}, e.g. :LooprPlan Add a --version flag')
    return false
  end
  send_for_loop_id('plan', {
    task = task,
    root = config.root(),
    settings = config.settings(),
  }, function(id)
    notify(('Loopr: planning (loop %s)'):format(id), vim.log.levels.INFO)
  end, on_done)
  return true
end

---Open the transcript of loop `id` (default: the loop of the artifact in the current buffer,
---else the newest running loop) and follow it live.
---@param id string|nil
---@param opts? loopr.TargetOpts
---@param on_done? fun(buf: integer|nil) Called with the buffer once open, nil on error (already notified).
function M.transcript(id, opts, on_done)
  require('loopr.transcript').open(id, opts, on_done)
end

---Open or refresh the status buffer.
---@return integer|nil buf
function M.status()
  return require('loopr.status').open()
end

---The lines `:LooprMcp` shows for the host's MCP servers.
---@param servers loopr.McpServerStatus[]
---@return string[]
function M.mcp_lines(servers)
  local configured = (config.get().mcp or {}).servers or {}
  local lines = {}
  local seen = {}
  for _, server in ipairs(servers) do
    seen[server.name] = true
    lines[#lines + 1] = ('%s (%s, %s, started %d times) in %s'):format(
      server.name,
      server.transport,
      server.state,
      server.starts,
      server.root
    )
    lines[#lines + 1] = '  tools: ' .. (#server.tools > 0 and table.concat(server.tools, ', ') or '(none)')
    for _, err in ipairs(server.recent_errors) do
      lines[#lines + 1] = '  error: ' .. err
    end
  end
  local names = vim.tbl_keys(configured)
  table.sort(names)
  for _, name in ipairs(names) do
    if not seen[name] then
      lines[#lines + 1] = ('%s (not started: no loop has used it yet)'):format(name)
    end
  end
  if #lines == 0 then
    lines[1] = 'no MCP servers configured (see :help loopr-mcp)'
  end
  return lines
end

---Show the host's MCP servers: each one's state, tools and recent errors, in a scratch
---buffer `loopr://mcp`.
---@return integer|nil buf
function M.mcp()
  local servers, err = require('loopr.host').request('mcp_status', {})
  if not servers then
    notify(tostring(err), vim.log.levels.ERROR)
    return nil
  end
  local lines = M.mcp_lines(servers)
  local name = 'loopr://mcp'
  local buf = vim.fn.bufnr(name)
  if buf == -1 then
    buf = vim.api.nvim_create_buf(false, true)
    vim.api.nvim_buf_set_name(buf, name)
    vim.bo[buf].buftype = 'nofile'
    vim.bo[buf].bufhidden = 'wipe'
    vim.bo[buf].swapfile = false
    require('loopr.ui').map_close(buf, 'MCP servers')
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  require('loopr.ui').open(buf, { name = 'Loopr MCP servers' })
  return buf
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

---Calls `callback` with the record of loop `id` in `root`, nil when there is none or the
---host cannot say (not waiting for the host meanwhile).
---@param root string
---@param id string
---@param callback fun(record: loopr.LoopRecord|nil)
local function with_record_of(root, id, callback)
  require('loopr.host').send('status', { root = root }, function(rows)
    for _, r in ipairs(type(rows) == 'table' and rows or {}) do
      if r.id == id then
        return callback(r)
      end
    end
    callback(nil)
  end)
end

---The loop the current buffer shows: its artifact's (plan.md, spec.md, phase.md) or its
---transcript's.
---@return string|nil loop_id
local function buffer_loop_id()
  local here = require('loopr.paths').buf_artifact()
  if here then
    return here.loop_id
  end
  local transcript = vim.b.loopr_loop_id
  return type(transcript) == 'string' and transcript or nil
end

---What `:LooprCancel` without an id cancels, from the host's rows (newest first): the loop
---of the current buffer when it or a loop below it is active; else, outside a Loopr buffer,
---the top loop of the one plan tree with an active loop; else the ones to choose from.
---@param rows loopr.LoopRecord[]
---@param here string|nil The current buffer's loop.
---@return string|nil target
---@return loopr.LoopRecord[] choices The tops of the trees that run, when there is no target.
local function cancel_target(rows, here)
  local by_id = {}
  for _, r in ipairs(rows) do
    by_id[r.id] = r
  end
  ---The loops from `r` up to its tree's top; bounded, so a broken parent chain cannot hang.
  local function lineage(r)
    local chain = { r }
    while #chain <= #rows and r.parent and by_id[r.parent] do
      r = by_id[r.parent]
      chain[#chain + 1] = r
    end
    return chain
  end
  local tops, seen = {}, {}
  for _, r in ipairs(rows) do
    if r.active then
      local chain = lineage(r)
      for _, above in ipairs(chain) do
        if above.id == here then
          return here, {}
        end
      end
      local top = chain[#chain]
      if not seen[top.id] then
        seen[top.id] = true
        tops[#tops + 1] = top
      end
    end
  end
  -- From the artifact of a tree that does not run, even the one tree that does is only
  -- cancelled when the user picks it.
  if #tops == 1 and not here then
    return tops[1].id, {}
  end
  return nil, tops
end

---Calls `send(target)` with loop `id`; without one, with the loop of the current artifact
---buffer when the host says `admits` of it (a standing: `awaits_approval`, `retryable`),
---else with nil (the host chooses).
---@param id string|nil
---@param root string
---@param admits string
---@param send fun(target: string|nil)
local function for_loop_here(id, root, admits, send)
  id = trimmed(id)
  local here = not id and require('loopr.paths').buf_artifact()
  if not here then
    return send(id)
  end
  with_record_of(root, here.loop_id, function(r)
    send((r and r[admits]) and r.id or nil)
  end)
end

---Cancel loop `id` and its descendants. Without `id`: the loop of the current artifact or
---transcript buffer if it or a loop below it is active, else the plan tree that runs, else
---(several run) the one the user picks with |vim.ui.select()|.
---Returns at once; the host's answer is notified.
---@param id string|nil
---@param opts? loopr.TargetOpts
---@param on_done? fun(loop_id: string|nil) Called with the cancelled loop, nil on error (already notified).
function M.cancel(id, opts, on_done)
  on_done = on_done or function() end
  local root = (opts and opts.root) or config.root()
  local cancel = loop_request('cancel', root, 'Loopr: cancelling %s', on_done)
  id = trimmed(id)
  if id then
    return cancel(id)
  end
  local here = buffer_loop_id()
  require('loopr.host').send('status', { root = root }, function(rows)
    local target, choices = cancel_target(type(rows) == 'table' and rows or {}, here)
    if target or #choices == 0 then
      -- With nothing active the host says so.
      return cancel(target)
    end
    vim.ui.select(choices, {
      prompt = 'Loopr: cancel which running plan?',
      format_item = function(r)
        return r.label
      end,
    }, function(choice)
      if not choice then
        return on_done(nil)
      end
      cancel(choice.id)
    end)
  end)
end

---Approve loop `id` so its children start. Without `id`: the loop of the current artifact
---buffer if it awaits approval, else the newest loop awaiting approval.
---Returns at once; the host's answer is notified.
---@param id string|nil
---@param opts? loopr.TargetOpts
---@param on_done? fun(loop_id: string|nil) Called with the approved loop, nil on error (already notified).
function M.approve(id, opts, on_done)
  local root = (opts and opts.root) or config.root()
  for_loop_here(id, root, 'awaits_approval', loop_request('approve', root, 'Loopr: approved %s', on_done))
end

---Re-run a loop with `feedback`; its descendants become invalidated. The loop is `opts.id`,
---else the one whose artifact is in the current buffer.
---Returns at once; the host's answer is notified.
---@param feedback string
---@param opts? loopr.ReviseOpts
---@param on_done? fun(loop_id: string|nil) Called with the revised loop, nil on error (already notified).
---@return boolean sent false when refused before asking the host (already notified).
function M.revise(feedback, opts, on_done)
  opts = opts or {}
  feedback = vim.trim(feedback or '')
  local id = trimmed(opts.id)
  if not id then
    local here = require('loopr.paths').buf_artifact()
    if not here then
      notify('LooprRevise works in an artifact buffer (plan.md, spec.md or phase.md); open one from :LooprStatus')
      return false
    end
    id = here.loop_id
  end
  local root = opts.root or config.root()
  if feedback == '' then
    -- Asked for, named as the host names the loop, rather than refused.
    with_record_of(root, id, function(r)
      local prompt = ('Revise %s: '):format(r and r.label or 'this artifact')
      vim.ui.input({ prompt = prompt }, function(answer)
        if answer and vim.trim(answer) ~= '' then
          M.revise(answer, vim.tbl_extend('force', opts, { id = id, root = root }), on_done)
        elseif on_done then
          on_done(nil)
        end
      end)
    end)
    return true
  end
  send_for_loop_id('revise', {
    root = root,
    id = id,
    feedback = feedback,
  }, function(_, label)
    notify(('Loopr: revising %s'):format(label), vim.log.levels.INFO)
  end, on_done)
  return true
end

---Run a loop that failed, was cancelled or was interrupted again (|:LooprRetry|): loop `id`,
---else the loop of the current artifact buffer if it can be retried, else the one the host
---chooses (the newest such loop, or the failed loop it waits for).
---Returns at once; the host's answer is notified.
---@param id string|nil
---@param opts? loopr.TargetOpts
---@param on_done? fun(loop_id: string|nil) Called with the loop retried, nil on error (already notified).
function M.retry(id, opts, on_done)
  local root = (opts and opts.root) or config.root()
  for_loop_here(id, root, 'retryable', loop_request('retry', root, 'Loopr: retrying %s', on_done))
end

---Put the tasks of phases in a quickfix list (|:LooprTasks|): of phase `phase` (a name),
---else of the current buffer's phase artifact, else of the current plan's phases (the plan of
---the current artifact buffer, else the newest plan with phases).
---@param phase string|nil
---@return integer|nil qf_id The quickfix list's id, nil on error or without tasks (notified).
function M.tasks(phase)
  return require('loopr.tasks').open(trimmed(phase), config.root())
end

---Put the requirements of a spec not yet verified in a quickfix list (|:LooprRequirements|),
---each at its line in spec.md: of spec `spec` (a name), else of the current buffer's spec (a
---spec.md, or the spec of a phase.md), else of the newest spec.
---@param spec string|nil
---@param loop_id? string A loop whose spec is meant (a spec, its phase or code loop).
---@return integer|nil qf_id The quickfix list's id, nil on error (notified).
function M.requirements(spec, loop_id)
  return require('loopr.requirements').open(trimmed(spec), config.root(), loop_id)
end

---Implement a phase with a code loop (|:LooprRun|): phase `phase` (a name or a phase loop
---id), else the phase whose `phase.md` is in the current buffer. Changes wait for approval
---per the `approvals` option. A word `agent=<name>` in `phase` has that coding agent write
---the code (|loopr-agents|).
---Returns at once; the host's answer is notified.
---@param phase string|nil
---@param on_done? fun(loop_id: string|nil) Called with the code loop, nil on error (already notified).
---@return boolean sent false when refused before asking the host (already notified).
function M.run(phase, on_done)
  local root = config.root()
  -- `agent=<name>` has that agent of `agents` write this run's code, in place of `code_agent`.
  local agent
  phase = (phase or ''):gsub('%s*agent=(%S*)%s*', function(name)
    agent = name
    return ' '
  end)
  local target = trimmed(phase)
  local here = not target and require('loopr.paths').buf_artifact()
  -- A phase.md runs its phase; a plan.md or spec.md every phase of its tree.
  if here and (here.kind == 'phase' or here.kind == 'spec' or here.kind == 'plan') then
    target = here.loop_id
  end
  if not target then
    notify('LooprRun needs a phase, spec or plan: :LooprRun {phase|spec|plan} (see :LooprStatus)')
    return false
  end
  local function announce(label)
    return function(id)
      notify(('Loopr: implementing %s (loop %s)'):format(label, id), vim.log.levels.INFO)
    end
  end
  local params = { root = root, phase = target, settings = config.settings(), agent = agent }
  -- A phase given by its loop id (this phase.md's, a status row's) is named in the message
  -- by its name, not its id.
  local by_id = here and here.loop_id or (target:match('^%d+%-%d+%-%d+%-%x+$') and target)
  if not by_id then
    send_for_loop_id('run', params, announce(target), on_done)
    return true
  end
  with_record_of(root, by_id, function(r)
    local label = r and (type(r.name) == 'string' and r.name or r.label) or by_id
    send_for_loop_id('run', params, announce(label), on_done)
  end)
  return true
end

---Verify the working tree against a phase or a whole spec (`:LooprVerify`), changing nothing:
---the host runs the verifier in the background; its findings fill a quickfix list and a
---message says what it found. Returns at once.
---@param name string|nil Phase or spec name (|loopr-phase-names|); default: the phase or spec
---of the current phase.md or spec.md buffer, else the only one (the host names the choices).
---@param on_done? fun(loop_id: string|nil) Called with the verification loop's id, nil on error.
---@return boolean sent
function M.verify(name, on_done)
  local target = trimmed(name)
  local here = not target and require('loopr.paths').buf_artifact()
  if here and (here.kind == 'phase' or here.kind == 'spec') then
    target = here.loop_id
  end
  local params = { root = config.root(), name = target or '', settings = config.settings() }
  send_for_loop_id('verify', params, function(id, label)
    notify(('Loopr: %s started (loop %s); its findings fill the quickfix list'):format(label, id), vim.log.levels.INFO)
  end, on_done)
  return true
end

---The phase the quickfix list in the current window is about: the one its Loopr list was
---made for (its `context`), else the phase of the entry under the cursor (a task's).
---@return string|nil
local function quickfix_phase()
  if vim.fn.win_gettype() ~= 'quickfix' then
    return nil
  end
  local context = vim.fn.getqflist({ context = 0 }).context
  local list = type(context) == 'table' and context.loopr or nil
  if type(list) == 'table' and type(list.phase) == 'string' then
    return list.phase
  end
  local entry = vim.fn.getqflist()[vim.fn.line('.')]
  local data = entry and entry.user_data
  return type(data) == 'table' and type(data.loop_id) == 'string' and data.loop_id or nil
end

---The phase a command is about: the argument, else the phase.md in the current buffer, else
---the phase of the Loopr list in the quickfix window.
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
  target = target or quickfix_phase()
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
---Returns at once; the outcome is notified.
---@param phase string|nil Phase name; default: the phase of the current phase.md buffer.
---@param force? boolean Also restore files changed since the loop changed them.
---@param on_done? fun(reply: loopr.UndoReply|nil) Called with the host's reply, nil on error (already notified).
---@return boolean sent false when refused before asking the host (already notified).
function M.undo(phase, force, on_done)
  local target = phase_argument(phase, 'LooprUndo')
  if not target then
    return false
  end
  require('loopr.changes').undo(target, config.root(), force, on_done)
  return true
end

---Put the working tree back as it was before `phase`'s code loop started: its changes and
---every later phase's go (`:LooprRewind`, `:LooprRewind!`). Returns at once; the outcome is
---notified.
---@param phase string|nil Phase name; default: the phase of the current phase.md buffer.
---@param force? boolean Also restore files changed since a loop changed them.
---@param on_done? fun(reply: loopr.RewindReply|nil) Called with the host's reply, nil on error (already notified).
---@return boolean sent false when refused before asking the host (already notified).
function M.rewind(phase, force, on_done)
  local target = phase_argument(phase, 'LooprRewind')
  if not target then
    return false
  end
  require('loopr.changes').rewind(target, config.root(), force, on_done)
  return true
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
      return on_done(nil)
    end
    host.send('resume', { root = root }, function(counts, err)
      if err then
        notify(err, vim.log.levels.WARN)
        return on_done(nil)
      end
      counts = type(counts) == 'table' and counts or {}
      local resuming = tonumber(counts.resuming) or 0
      local waiting = tonumber(counts.waiting_for_budget) or 0
      local parts = {}
      if resuming > 0 then
        parts[#parts + 1] = ('resuming %d loop(s)'):format(resuming)
      end
      if waiting > 0 then
        local text = "%d loop(s) wait for their plan tree's budget (:LooprApprove, or a larger budget, lets them go on)"
        parts[#parts + 1] = text:format(waiting)
      end
      if #parts > 0 then
        notify('Loopr: ' .. table.concat(parts, '; '), vim.log.levels.INFO)
      end
      on_done(tonumber(counts.active))
    end)
  end
  local ok, err = pcall(vim.system, { bin, 'has-state', '--root', root }, { text = true }, function(result)
    vim.schedule(function()
      resume(result)
    end)
  end)
  if not ok then
    notify(('Loopr: cannot check for loops to resume: %s'):format(err), vim.log.levels.WARN)
    on_done(nil)
  end
end

---Open the host's log file per the `layout` option, at its end.
---@return integer|nil buf
function M.open_log()
  local file = require('loopr.host').log_file()
  if not vim.uv.fs_stat(file) then
    notify(('Loopr: no log file yet at %s'):format(file), vim.log.levels.WARN)
    return nil
  end
  local buf = vim.fn.bufadd(file)
  vim.fn.bufload(buf)
  vim.bo[buf].buflisted = true
  vim.bo[buf].autoread = true
  -- Open already: what the host wrote since.
  vim.cmd.checktime(buf)
  require('loopr.ui').map_close(buf, 'log')
  local win = require('loopr.ui').open(buf, { name = 'Loopr log' })
  if win then
    vim.api.nvim_win_set_cursor(win, { vim.api.nvim_buf_line_count(buf), 0 })
  end
  return buf
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

---@alias loopr.Purpose "approve"|"cancel"|"retry"|"run"

---The ids of the project's loops that the host says `purpose` takes (every loop without one)
---and that start with `arglead`.
---@param arglead string|nil
---@param purpose? loopr.Purpose
---@return string[]
local function loop_ids_for(arglead, purpose)
  local ids = require('loopr.host').request('loop_ids', { root = config.root(), purpose = purpose })
  return starting_with(type(ids) == 'table' and ids or {}, arglead)
end

---What <Tab> offers for a command's argument (`complete` of its row in
---lua/loopr/commands.lua), starting with `arglead`: the host's names of the current phases
---("phases") or specs ("specs"), of the phases that may run ("run", and after `agent=` the
---configured coding agents) or of the phases and specs
---a verification takes ("verify"), each the shortest that picks its phase
---(|loopr-phase-names|); else the ids of every loop ("loops") or of the loops an action takes
---(a purpose), which take loop names too.
---@param what loopr.Completion
---@param arglead string|nil
---@return string[]
function M.complete(what, arglead)
  local host = require('loopr.host')
  local names
  if what == 'phases' then
    names = host.request('phase_names', { root = config.root() })
  elseif what == 'specs' then
    names = host.request('spec_names', { root = config.root() })
  elseif what == 'run' and vim.startswith(arglead or '', 'agent=') then
    -- `:LooprRun {phase} agent=<name>`: the agents the settings configure.
    names = vim.tbl_map(function(name)
      return 'agent=' .. name
    end, vim.tbl_keys(config.get().agents or {}))
    table.sort(names)
  elseif what == 'run' then
    names = host.request('loop_names', { root = config.root(), purpose = 'run' })
  elseif what == 'verify' then
    names = host.request('verify_names', { root = config.root() })
  else
    return loop_ids_for(arglead, what ~= 'loops' and what or nil)
  end
  return starting_with(type(names) == 'table' and names or {}, arglead)
end

---Complete ids of loops `:LooprCancel` stops: pending, running, awaiting approval, paused or
---interrupted.
---@param arglead string
---@return string[]
function M.complete_loop_ids(arglead)
  return loop_ids_for(arglead, 'cancel')
end

---Complete the ids of every loop of the project (for `:LooprTranscript`).
---@param arglead string
---@return string[]
function M.complete_all_loop_ids(arglead)
  return loop_ids_for(arglead, nil)
end

---Complete ids of loops awaiting approval, or paused or held at their plan tree's budget (for
---`:LooprApprove`).
---@param arglead string
---@return string[]
function M.complete_awaiting_ids(arglead)
  return loop_ids_for(arglead, 'approve')
end

---Complete names of current (not invalidated) phases (for `:LooprTasks`, `:LooprRun`,
---`:LooprChanges`, `:LooprUndo`, `:LooprRewind`), as the host names them: `spec/phase` where two specs have a
---phase of the same name.
---@param arglead string
---@return string[]
function M.complete_phase_names(arglead)
  return M.complete('phases', arglead)
end

---Complete ids of loops that can be retried (for `:LooprRetry`).
---@param arglead string
---@return string[]
function M.complete_retryable_ids(arglead)
  return loop_ids_for(arglead, 'retry')
end

return M

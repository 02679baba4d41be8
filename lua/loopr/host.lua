-- Lifecycle of the `loopr` msgpack-RPC host job and requests to it.

local config = require('loopr.config')

local M = {}

local STDERR_KEEP = 50

---@class loopr.HostState
---@field chan integer|nil Job/channel id of the running host.
---@field dead boolean The host was started and has since exited.
---@field code integer|nil Exit code of the last host that died.
---@field stopping boolean We asked the host to stop (VimLeavePre).
---@field stderr string[] Last lines of the host's stderr.
---@field partial string Unterminated stderr line.
---@field log_file string|nil Log file the running host writes to.
---@field told loopr.Told|nil What the running host has been told (provider variables, budget, MCP servers).
---@field check loopr.HelloCheck|nil The running host's version check (settled once it answered).
local state = { chan = nil, dead = false, code = nil, stopping = false, stderr = {}, partial = '', log_file = nil }

---Pass a budget or prices setup() changed to the running host, without waiting; nothing
---when no host runs (the first request passes them).
function M.budget_changed()
  local chan = M.chan()
  if chan then
    require('loopr.host_told').send_changed_budget(state.told, chan)
  end
end

---@alias loopr.ReplyCallback fun(result: any, err: string|nil)

---@class loopr.PendingRequest
---@field chan integer The host asked; its exit fails the request.
---@field method string
---@field callback loopr.ReplyCallback

---Requests sent with `M.send` the host has not answered yet, by token.
---@type table<integer, loopr.PendingRequest>
local pending = {}
local last_token = 0
---Sent requests whose callback has not finished yet (answered ones wait for their turn).
local unfinished = 0

---Run `callback` on the main loop after what is already scheduled (the handlers of events the
---host sent before the answer), exactly once.
---@param request loopr.PendingRequest
---@param result any
---@param err string|nil
local function finish(request, result, err)
  vim.schedule(function()
    local ok, failure = pcall(request.callback, result, err)
    unfinished = unfinished - 1
    if not ok then
      require('loopr.notify').notify(
        ('Loopr: error handling the answer to %s: %s'):format(request.method, failure),
        vim.log.levels.ERROR
      )
    end
  end)
end

---Fail every request host `chan` had not answered: it exited and never will.
---@param chan integer
---@param code integer|nil
local function fail_pending(chan, code)
  -- The stderr kept is the current host's.
  local tail = chan == state.chan and state.stderr[#state.stderr] or nil
  for token, request in pairs(pending) do
    if request.chan == chan then
      pending[token] = nil
      finish(
        request,
        nil,
        ('Loopr: host exited (code %s) before it answered %s%s'):format(
          code or '?',
          request.method,
          tail and (': ' .. tail) or ''
        )
      )
    end
  end
end

---Directory holding `plugin/`, `lua/` and `target/` (two levels above this file's directory).
---@return string
function M.plugin_root()
  local source = debug.getinfo(1, 'S').source:gsub('^@', '')
  local file = vim.uv.fs_realpath(source) or vim.fn.fnamemodify(source, ':p')
  return vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(file)))
end

---@param path string
---@return string|nil
local function executable(path)
  if vim.fn.has('win32') == 1 and vim.fn.executable(path) == 0 and vim.fn.executable(path .. '.exe') == 1 then
    path = path .. '.exe'
  end
  if vim.fn.executable(path) == 1 then
    local full = vim.fn.exepath(path)
    return full ~= '' and full or path
  end
  return nil
end

---Locate the host binary: `bin` option, then bin/loopr (what :LooprInstall installs), then
---target/release, target/debug, then PATH.
---@return string|nil path
---@return string|nil err
function M.resolve_bin()
  local bin = config.get().bin
  if bin then
    local path = executable(vim.fs.normalize(bin))
    if path then
      return path
    end
    return nil, ('loopr: bin %s (from setup) is not an executable file'):format(vim.inspect(bin))
  end
  local root = M.plugin_root()
  local installed = executable(vim.fs.joinpath(root, 'bin', 'loopr'))
  if installed then
    return installed
  end
  for _, profile in ipairs({ 'release', 'debug' }) do
    local path = executable(vim.fs.joinpath(root, 'target', profile, 'loopr'))
    if path then
      return path
    end
  end
  local on_path = vim.fn.exepath('loopr')
  if on_path ~= '' then
    return on_path
  end
  return nil, ('loopr: host binary not found; run `cargo build --release` in %s (or set the `bin` option)'):format(root)
end

---@param data string[]
local function collect_stderr(data)
  data[1] = state.partial .. (data[1] or '')
  state.partial = table.remove(data) or ''
  for _, line in ipairs(data) do
    table.insert(state.stderr, line)
    if #state.stderr > STDERR_KEEP then
      table.remove(state.stderr, 1)
    end
  end
end

---@param job integer
---@param code integer
local function on_exit(job, code)
  fail_pending(job, code)
  if job ~= state.chan then
    return
  end
  state.dead, state.code = true, code
  -- Prompts of the host that exited can never be answered; its successor asks anew.
  vim.schedule(function()
    local ok, approvals = pcall(require, 'loopr.approvals')
    if ok then
      approvals.reset()
    end
  end)
  if state.stopping or code == 0 then
    return
  end
  local lines = vim.deepcopy(state.stderr)
  if state.partial ~= '' then
    table.insert(lines, state.partial)
  end
  vim.schedule(function()
    -- A command that started a new host meanwhile already said this one exited (and waits
    -- for the new one's `hello`, running this then): not its own failure to report.
    if state.chan ~= job then
      return
    end
    local tail = #lines > 0 and (':\n' .. table.concat(lines, '\n')) or ''
    require('loopr.notify').notify(('Loopr: host exited (code %d)%s'):format(code, tail), vim.log.levels.ERROR)
  end)
end

---Stop host `job`, refused, quietly (its exit is no news).
---@param job integer
local function stop_refused(job)
  state.stopping, state.dead = true, true
  pcall(vim.fn.jobstop, job)
end

---The check of a host just started: settled once, by its `hello`, its exit or the timeout.
---@class loopr.HelloCheck
---@field job integer
---@field bin string
---@field settled boolean
---@field err string|nil Why the host is not run; nil once it matched.

---@param check loopr.HelloCheck
---@param err string|nil
local function settle(check, err)
  if check.settled then
    return
  end
  check.settled, check.err = true, err
  if err then
    stop_refused(check.job)
  end
end

---Judge the host's answer to `hello` (nil `reply`: it did not say, or exited first).
---@param check loopr.HelloCheck
---@param reply any
---@param err string|nil
local function judge(check, reply, err)
  local host_match = require('loopr.host_match')
  local reported = nil
  if type(reply) == 'table' and reply.version then
    reported = { version = reply.version, protocol = reply.protocol }
    if host_match.matches(reported) then
      return settle(check, nil)
    end
  elseif err and err:find('exited', 1, true) then
    return settle(check, err)
  end
  -- A host older than `hello` answers that it knows no such request.
  local message = host_match.refusal(check.bin, reported, M.plugin_root())
  host_match.remember(check.bin, message)
  settle(check, message)
end

---@param check loopr.HelloCheck
---@return string
local function silent_host(check)
  return ('Loopr: the host %s did not say its version within %d s, so it is not run; is it a Loopr host? (see :checkhealth loopr)'):format(
    check.bin,
    require('loopr.host_match').HELLO_WAIT_MS / 1000
  )
end

---Ask the host of `check` its version and protocol before anything else; the answer, its exit
---or `host_match.HELLO_WAIT_MS` (the host answers at once) settles `check`.
---@param check loopr.HelloCheck
local function ask_hello(check)
  last_token = last_token + 1
  local token = last_token
  unfinished = unfinished + 1
  pending[token] = {
    chan = check.job,
    method = 'hello',
    callback = function(reply, err)
      judge(check, reply, err)
    end,
  }
  local sent, send_error = pcall(vim.rpcnotify, check.job, 'request', token, 'hello', vim.empty_dict())
  if not sent then
    pending[token] = nil
    unfinished = unfinished - 1
    return settle(check, ('Loopr: cannot ask the host %s its version: %s'):format(check.bin, send_error))
  end
  vim.defer_fn(function()
    if not check.settled then
      pending[token] = nil
      unfinished = unfinished - 1
      settle(check, silent_host(check))
    end
  end, require('loopr.host_match').HELLO_WAIT_MS)
end

---Wait until `check` is settled. `vim.wait` runs other commands meanwhile; one that needs
---the host comes here too (`M.ensure`) and waits for the same answer, whichever returns first.
---@param check loopr.HelloCheck
---@return string|nil err Why the host is not run.
local function await_check(check)
  local bound = require('loopr.host_match').HELLO_WAIT_MS + 1000
  vim.wait(bound, function()
    return check.settled
  end, 10)
  settle(check, silent_host(check))
  return check.err
end

---@return string|nil err
local function start()
  local bin, err = M.resolve_bin()
  if not bin then
    return err
  end
  local refused = require('loopr.host_match').refused(bin)
  if refused then
    return refused
  end
  local cfg = config.get()
  local log_file = vim.fs.normalize(cfg.log_file)
  pcall(vim.fn.mkdir, vim.fs.dirname(log_file), 'p')
  state.stderr, state.partial, state.stopping = {}, '', false
  -- The job inherits Neovim's environment as it is now.
  local told = require('loopr.host_told').at_start()
  local ok, job = pcall(vim.fn.jobstart, { bin, 'rpc', '--log-file', log_file, '--log-level', cfg.log_level }, {
    rpc = true,
    on_exit = function(id, code)
      on_exit(id, code)
    end,
    on_stderr = function(_, data)
      collect_stderr(data)
    end,
  })
  if not ok or job <= 0 then
    return ('loopr: failed to start host %s: %s'):format(bin, ok and ('jobstart returned ' .. job) or job)
  end
  state.chan, state.dead, state.code, state.log_file = job, false, nil, log_file
  state.told = told
  state.check = { job = job, bin = bin, settled = false }
  ask_hello(state.check)
  return await_check(state.check)
end

---Whether the host process of `state.chan` is still running.
---@return boolean
local function alive()
  return state.chan ~= nil and not state.dead and vim.fn.jobwait({ state.chan }, 0)[1] == -1
end

---Mark the host dead if its process is gone; returns true when it is dead.
---@return boolean
local function reap()
  if state.chan and not state.dead and not alive() then
    local code = vim.fn.jobwait({ state.chan }, 0)[1]
    state.dead, state.code = true, code >= 0 and code or state.code
  end
  return state.dead
end

---Start the host unless it runs; restarts (and warns) after it died.
---@return integer|nil chan
---@return string|nil err
function M.ensure()
  local check = state.check
  if check and not check.settled then
    -- Started further up the stack, whose wait for the host's `hello` let this run.
    local err = await_check(check)
    if err then
      return nil, err
    end
    return check.job
  end
  if alive() then
    return state.chan
  end
  local restarted = reap() and not state.stopping
  local code = state.code
  local err = start()
  if err then
    return nil, err
  end
  if restarted then
    require('loopr.notify').notify(('Loopr: host exited (code %s); restarted'):format(code or '?'), vim.log.levels.WARN)
  end
  return state.chan
end

---Turn an rpcrequest error into the host's own message.
---@param err any
---@return string
local function clean_error(err)
  local msg = type(err) == 'string' and err or vim.inspect(err)
  msg = msg:gsub('^Vim:', '')
  -- "Error invoking 'plan' on channel 3:\n<host message>"
  msg = msg:gsub("^Error invoking '[^']*' on channel %d+[^:\n]*:%s*", '')
  msg = vim.trim(msg)
  if not msg:find('^loopr') and not msg:find('^Loopr') then
    msg = 'Loopr: ' .. msg
  end
  return msg
end

---Mark the host of `chan` dead when `err` says its channel is gone; returns true if so.
---@param chan integer
---@param err any
---@return boolean
local function channel_gone(chan, err)
  local msg = type(err) == 'string' and err or ''
  local gone = next(vim.api.nvim_get_chan_info(chan)) == nil
    or msg:find('Invalid channel: %d+$') ~= nil
    or msg:find('Channel was closed by the client$') ~= nil
  if gone then
    -- Let the exit be processed (a local process, not the network), then treat it as dead.
    local code = vim.fn.jobwait({ chan }, 500)[1]
    if code == -1 then
      pcall(vim.fn.jobstop, chan)
    end
    if state.chan == chan and not state.dead then
      state.dead, state.code = true, code >= 0 and code or state.code
    end
  end
  reap()
  return state.dead and state.chan == chan
end

---Send a request the host answers at once. A host that died since the last request is
---restarted (with a warning) and the request sent once more. A key or base URL set in Neovim
---since the host got them is passed to it first, so the request's loops use them, and so is
---the setup()'s budget.
---@param method string
---@param params table|nil One table of named parameters.
---@return any result
---@return string|nil err Human readable error, nil on success.
function M.request(method, params)
  if params == nil or next(params) == nil then
    params = vim.empty_dict()
  end
  for attempt = 1, 2 do
    local chan, err = M.ensure()
    if not chan then
      return nil, err
    end
    local ok, result = require('loopr.host_told').send_changed(state.told, chan)
    if ok then
      ok, result = pcall(vim.rpcrequest, chan, method, params)
    end
    if ok then
      return result
    end
    if not channel_gone(chan, result) then
      return nil, clean_error(result)
    end
    if attempt == 2 then
      local tail = state.stderr[#state.stderr]
      return nil,
        ('Loopr: host exited (code %s) during %s%s'):format(state.code or '?', method, tail and (': ' .. tail) or '')
    end
  end
end

---Send a request without waiting for the answer: `callback(result, err)` gets it later, on the
---main loop after the handlers of events the host sent before it, exactly once: with the
---host's error, or an error when the host exits first. A host found dead is restarted (with a
---warning) first; the first request starts it without waiting for it to be ready (the request
---waits in the pipe). Changed keys or base URLs go first, as for `M.request`.
---@param method string
---@param params table|nil One table of named parameters.
---@param callback loopr.ReplyCallback
---@return integer|nil token The request's token; nil when it could not be sent (the callback gets the error).
function M.send(method, params, callback)
  if params == nil or next(params) == nil then
    params = vim.empty_dict()
  end
  -- Counted only once sent or refused: while `M.ensure` waits for a new host's `hello`, other
  -- commands run, and one waiting for `M.outstanding()` to reach 0 would wait for this one.
  local refused = { chan = -1, method = method, callback = callback }
  ---@param err string
  local function refuse(err)
    unfinished = unfinished + 1
    finish(refused, nil, err)
  end
  for attempt = 1, 2 do
    local chan, err = M.ensure()
    if not chan then
      return refuse(err)
    end
    last_token = last_token + 1
    local token = last_token
    pending[token] = { chan = chan, method = method, callback = callback }
    unfinished = unfinished + 1
    local ok, failure = require('loopr.host_told').send_changed(state.told, chan)
    if ok then
      ok, failure = pcall(vim.rpcnotify, chan, 'request', token, method, params)
    end
    if ok then
      return token
    end
    pending[token] = nil
    unfinished = unfinished - 1
    -- Not sent: trying again with a new host cannot do anything twice.
    if not channel_gone(chan, failure) then
      return refuse(clean_error(failure))
    end
    if attempt == 2 then
      return refuse(('Loopr: host exited (code %s) before %s was sent'):format(state.code or '?', method))
    end
  end
end

---The host's answer to request `token` (called by the host, through the queue that brings
---events, so after the events it sent before).
---@param token integer
---@param err string|nil The host's error message, nil on success.
---@param result any The reply, nil on error.
---@return nil
function M.reply(token, err, result)
  local request = pending[token]
  if not request then
    -- Already failed (the host was taken for dead): the callback ran once, with that error.
    return nil
  end
  pending[token] = nil
  if err == vim.NIL then
    err = nil
  end
  if result == vim.NIL then
    result = nil
  end
  finish(request, result, err and clean_error(err) or nil)
  return nil
end

---How many requests sent with `M.send` (and `hello`s) have not had their callback run yet.
---@return integer
function M.outstanding()
  return unfinished
end

---Channel id of the running host, or nil.
---@return integer|nil
function M.chan()
  return alive() and state.chan or nil
end

---Process id of the running host (for tests), or nil.
---@return integer|nil
function M.pid()
  local chan = M.chan()
  if not chan then
    return nil
  end
  local ok, pid = pcall(vim.fn.jobpid, chan)
  return ok and pid or nil
end

---Log file the running host was started with, else the configured one.
---@return string
function M.log_file()
  return (alive() and state.log_file) or vim.fs.normalize(config.get().log_file)
end

---Stop the host job if it runs.
function M.stop()
  if alive() then
    state.stopping = true
    vim.fn.jobstop(state.chan)
  end
end

---`count` things as words: `1 loop running`, `2 loops running`.
---@param count integer
---@param one string
---@param many string
---@return string
local function counted(count, one, many)
  return ('%d %s'):format(count, count == 1 and one or many)
end

---What quitting leaves under way in the current project, as one line, nil when nothing: its
---loops running or waiting to, those awaiting approval, and the tool approvals unanswered.
---@return string|nil
local function left_under_way()
  local ok, rows = pcall(M.request, 'status', { root = config.root() })
  local running, awaiting = 0, 0
  for _, r in ipairs(ok and type(rows) == 'table' and rows or {}) do
    if r.awaits_approval then
      awaiting = awaiting + 1
    elseif r.active then
      running = running + 1
    end
  end
  local approvals = package.loaded['loopr.approvals']
  local unanswered = approvals and #approvals.pending() or 0
  local parts = {}
  if running > 0 then
    parts[#parts + 1] = counted(running, 'loop running', 'loops running')
  end
  if awaiting > 0 then
    parts[#parts + 1] = ('%d awaiting approval'):format(awaiting)
  end
  if unanswered > 0 then
    parts[#parts + 1] = counted(unanswered, 'tool approval unanswered', 'tool approvals unanswered')
  end
  if #parts == 0 then
    return nil
  end
  local listed = #parts == 1 and parts[1]
    or table.concat(vim.list_slice(parts, 1, #parts - 1), ', ') .. ' and ' .. parts[#parts]
  local next_time = config.get().resume and 'they go on when you open this project again (:LooprStatus)'
    or 'they wait for you in :LooprStatus (resume is off: :LooprRetry runs the interrupted ones)'
  return ('Loopr: %s; %s'):format(listed, next_time)
end

---Whether a terminal UI shows Neovim (it names its terminal; a GUI or a script does not):
---what it shows as Neovim exits goes with its screen.
---@return boolean
local function terminal_ui()
  for _, ui in ipairs(vim.api.nvim_list_uis()) do
    if type(ui.term_name) == 'string' and ui.term_name ~= '' then
      return true
    end
  end
  return false
end

---Whether the user was told at this exit what Loopr leaves under way.
local told_at_exit = false

local augroup = vim.api.nvim_create_augroup('loopr_host', { clear = true })
vim.api.nvim_create_autocmd('ExitPre', {
  group = augroup,
  desc = "Say what Loopr leaves under way before a terminal's screen goes",
  callback = function()
    told_at_exit = false
    if not (alive() and terminal_ui()) then
      return
    end
    local message = left_under_way()
    if message then
      -- A terminal's screen is gone once Neovim exits, and what it echoed with it: the
      -- message waits for a key, once per exit.
      told_at_exit = true
      vim.fn.confirm(message, '&OK', 1, 'Warning')
    end
  end,
})
vim.api.nvim_create_autocmd('VimLeavePre', {
  group = augroup,
  desc = 'Say what Loopr leaves under way, once, and stop the Loopr host',
  callback = function()
    if alive() and not told_at_exit then
      local message = left_under_way()
      if message then
        -- Echoed at once: nothing scheduled runs any more. It stays in :messages and goes to
        -- 'verbosefile' if one is set.
        vim.api.nvim_echo({ { message, 'WarningMsg' } }, true, {})
      end
    end
    M.stop()
  end,
})

return M

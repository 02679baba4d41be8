-- `:checkhealth loopr`.

local M = {}

local health = vim.health

local function check_neovim()
  local v = vim.version()
  local version = ('%d.%d.%d'):format(v.major, v.minor, v.patch)
  if vim.fn.has('nvim-0.10') == 1 then
    health.ok('Neovim ' .. version)
  else
    health.error('Neovim ' .. version .. ' is too old', { 'Loopr needs Neovim >= 0.10' })
  end
end

---What `bin --version` says, or nil after reporting why it could not say.
---@param bin string
---@param root string
---@return loopr.HostVersion|nil
local function host_version(bin, root)
  local rebuild = 'Rebuild with `cargo build --release` in ' .. root .. ', or run :LooprInstall'
  local ok, res = pcall(function()
    return vim.system({ bin, '--version' }, { text = true }):wait(5000)
  end)
  if not ok then
    health.error(('`%s --version` could not run: %s'):format(bin, res))
  elseif res.code ~= 0 then
    health.error(('`%s --version` failed (exit %d)'):format(bin, res.code), { vim.trim(res.stderr or ''), rebuild })
  else
    local reported = require('loopr.host_match').parse_version_line(vim.trim(res.stdout or ''))
    if not reported then
      health.error(('`%s --version` does not say a Loopr version'):format(bin), { rebuild })
    end
    return reported
  end
end

---Which host binary runs, from where, its version and protocol against the plugin's.
local function check_host()
  local host = require('loopr.host')
  local host_match = require('loopr.host_match')
  local bin, err = host.resolve_bin()
  if not bin then
    health.error(require('loopr.notify').prefixed(err or 'host binary not found'))
    return
  end
  local root = host.plugin_root()
  health.ok(('host binary: %s (%s)'):format(bin, host_match.origin(bin, require('loopr.config').get().bin, root)))
  local reported = host_version(bin, root)
  local expected = host_match.expected()
  if reported and host_match.matches(reported) then
    local same = reported.version == expected.version and 'as the plugin expects'
      or ('the protocol the plugin speaks (the plugin is %s)'):format(expected.version)
    health.ok(('host version: %s, %s'):format(host_match.describe(reported), same))
  elseif reported then
    health.error(
      ('host version: %s, but the plugin is %s: it is not run'):format(
        host_match.describe(reported),
        host_match.describe(expected)
      ),
      host_match.fixes(root)
    )
  end
  local install = require('loopr.install')
  local uname = vim.uv.os_uname()
  local target = install.target(uname)
  if target then
    health.info(
      ('release for this system: %s (what :LooprInstall downloads)'):format(install.asset_url(expected.version, target))
    )
  else
    health.info(
      ('no release is built for %s %s: :LooprInstall builds from source with cargo'):format(
        uname.sysname,
        uname.machine
      )
    )
  end
  if host.chan() then
    local running = host.request('hello', {})
    health.info(
      ('running host: pid %s, %s'):format(host.pid() or '?', running and host_match.describe(running) or 'unknown')
    )
  end
end

---@param value any
---@return boolean
local function present(value)
  return value ~= nil and value ~= vim.NIL
end

local window_words = {
  server = "the server's window",
  num_ctx = 'num_ctx',
  model = "the model's maximum",
}

---What the server says about its context window (a local one is asked, once per host run),
---and the max_tokens and context_budget loops get: set, fitted to the window, or defaults.
---@param provider string
---@param limits table
local function check_limits(provider, limits)
  local fix = 'set max_tokens and context_budget to fit the server (see :help loopr-option-context_budget)'
  if limits.server == 'unavailable' then
    health.warn('cannot ask the server for its context window: ' .. tostring(limits.server_error), {
      'start the server, then run :checkhealth loopr again',
      fix,
    })
  elseif limits.server == 'reported' then
    local report = limits.report
    if not present(report.answered_by) then
      health.warn('the server does not say its context window', { fix })
    else
      local said = {}
      if present(report.context_window) then
        said[#said + 1] = ('context window %d tokens'):format(report.context_window)
      end
      if present(report.model_max) then
        said[#said + 1] = ("the model's maximum %d tokens"):format(report.model_max)
      end
      if present(report.model) then
        said[#said + 1] = 'model ' .. report.model
      end
      health.info(('server (%s): %s'):format(report.answered_by, table.concat(said, ', ')))
    end
  end
  local window = present(limits.window) and limits.window or nil
  local function origin(set)
    if set then
      return 'setting'
    elseif window then
      return ('fitted to %s, %d tokens'):format(window_words[window.from] or window.from, window.tokens)
    end
    return 'default'
  end
  health.info(
    ('max_tokens %d (%s), context_budget %d (%s)'):format(
      limits.max_tokens,
      origin(limits.max_tokens_set),
      limits.context_budget,
      origin(limits.context_budget_set)
    )
  )
  if window and limits.max_tokens >= window.tokens then
    health.warn(
      ('max_tokens %d takes the whole window of %d tokens'):format(limits.max_tokens, window.tokens),
      { 'leave max_tokens unset, or set it to a quarter of the window' }
    )
  end
  if provider == 'ollama' and window and window.from == 'model' then
    health.warn(
      'Ollama runs the model with its own default window (OLLAMA_CONTEXT_LENGTH, 4096 tokens on most machines), which it does not tell',
      { 'set num_ctx (see :help loopr-option-num_ctx)' }
    )
  end
end

---The provider the current settings lead to, as the host resolves it (the one place that
---knows the variables and defaults); never a key, only whether it is set.
local function check_provider()
  local host = require('loopr.host')
  local info, err = host.request('provider', { settings = require('loopr.config').settings() })
  if not info then
    health.error('cannot ask the host about the provider: ' .. tostring(err))
    return
  end
  health.info(('provider: %s'):format(info.provider))
  health.info(('base URL: %s (%s)'):format(info.base_url, ({
    setting = 'base_url option',
    variable = '$' .. info.base_url_variable,
    default = 'default; $' .. info.base_url_variable .. ' is not set',
  })[info.base_url_source] or info.base_url_source))
  local models = {}
  for _, level in ipairs({ 'plan', 'spec', 'phase', 'review', 'code' }) do
    if info.models[level] then
      models[#models + 1] = ('%s: %s'):format(level, info.models[level])
    end
  end
  if #models > 0 then
    health.info('models: ' .. table.concat(models, ', '))
  end
  if info.tool_protocol ~= 'native' then
    local format = (info.tool_protocol == 'xml' or info.tool_protocol == 'markdown')
        and (', calls as %s'):format(info.tool_format)
      or ''
    health.info(('tool calls: %s text protocol%s'):format(info.tool_protocol, format))
  end
  local key = info.key_variable
  if key == vim.NIL or key == nil then
    health.info('no API key used')
  elseif info.key_set then
    health.ok(('%s is set'):format(key))
  elseif info.key_need == 'required' then
    health.error(('%s is not set'):format(key), {
      ('export %s before starting Neovim'):format(key),
      ("or set it in Neovim: :let $%s = '<key>' (the next Loopr command passes it to the host)"):format(key),
    })
  else
    health.info(('%s is not set (fine for a local server that takes no key)'):format(key))
  end
  if
    info.problem ~= vim.NIL
    and info.problem ~= nil
    and not (key and info.key_need == 'required' and not info.key_set)
  then
    health.error(info.problem)
  end
  if info.limits ~= vim.NIL and info.limits ~= nil then
    check_limits(info.provider, info.limits)
  end
end

---The project's rules files every loop's system prompt holds, as the host reads them.
local function check_rules()
  local config = require('loopr.config')
  local reply, err = require('loopr.host').request('rules', { root = config.root(), settings = config.settings() })
  if err then
    health.error('cannot ask the host about the rules files: ' .. tostring(err))
    return
  end
  if #reply.used == 0 then
    health.info("no rules files in this project (looked for the rules_files option's list)")
  end
  for _, used in ipairs(reply.used) do
    health.ok('rules file: ' .. used)
  end
  for _, refused in ipairs(reply.refused) do
    health.warn(('rules file %s is not read: %s'):format(refused.path, refused.reason))
  end
end

local function check_storage()
  local env = vim.env.LOOPR_HOME
  local dir = (env and env ~= '') and env or vim.fs.joinpath(vim.uv.os_homedir() or '~', '.loopr')
  pcall(vim.fn.mkdir, dir, 'p')
  if vim.fn.filewritable(dir) == 2 then
    health.ok('LOOPR_HOME writable: ' .. dir)
  else
    health.error('LOOPR_HOME is not a writable directory: ' .. dir, { 'Set LOOPR_HOME to a writable directory' })
  end
  local log_file = require('loopr.host').log_file()
  local log_dir = vim.fs.dirname(log_file)
  pcall(vim.fn.mkdir, log_dir, 'p')
  if vim.fn.filewritable(log_dir) == 2 then
    health.ok('log file: ' .. log_file)
  else
    health.warn('log directory is not writable: ' .. log_dir)
  end
end

---Run all checks.
---Which sandbox commands run in, as the host binary says (it decides, not Lua).
local function check_sandbox()
  local bin = require('loopr.host').resolve_bin()
  if not bin then
    health.warn('cannot tell: the host binary is missing (see above)')
    return
  end
  local settings = vim.json.encode({ sandbox = require('loopr.config').get().sandbox })
  local ok, res = pcall(function()
    return vim.system({ bin, 'sandbox', '--settings', settings }, { text = true }):wait(5000)
  end)
  if not ok then
    health.error(('`%s sandbox` could not run: %s'):format(bin, res))
  elseif res.code == 0 then
    health.ok('commands run in a sandbox: ' .. vim.trim(res.stdout or ''))
  elseif res.code == 1 then
    health.warn('commands run unsandboxed and are always asked about', { vim.trim(res.stdout or '') })
  else
    health.error('the sandbox settings are invalid', { vim.trim(res.stderr or '') })
  end
end

---Starts each configured MCP server (for the current project) and lists its tools.
local function check_mcp()
  local cfg = require('loopr.config')
  local settings = cfg.settings()
  if not settings.mcp then
    health.info('no MCP servers configured')
    return
  end
  local probed, err = require('loopr.host').request('mcp_probe', { root = cfg.root(), settings = settings })
  if not probed then
    health.error('cannot probe the MCP servers: ' .. tostring(err))
    return
  end
  for _, server in ipairs(probed) do
    if server.error and server.error ~= vim.NIL then
      health.error(('MCP server %s: %s'):format(server.name, server.error))
    else
      health.ok(('MCP server %s starts; tools: %s'):format(server.name, table.concat(server.tools, ', ')))
    end
  end
end

---Starts each configured coding agent (in the current project), runs ACP's `initialize` and
---shows what it says of itself, or why it failed.
local function check_agents()
  local cfg = require('loopr.config')
  local settings = cfg.settings()
  if not settings.agents then
    health.info('no coding agents configured (agents); phases are coded by Loopr itself')
    return
  end
  local probed, err = require('loopr.host').request('agent_probe', { root = cfg.root(), settings = settings })
  if not probed then
    health.error('cannot probe the coding agents: ' .. tostring(err))
    return
  end
  for _, agent in ipairs(probed) do
    if agent.error and agent.error ~= vim.NIL then
      health.error(('agent %s: %s'):format(agent.name, agent.error))
    else
      local version = agent.version ~= vim.NIL and agent.version or 'no version given'
      health.ok(
        ('agent %s starts: %s %s, ACP protocol version %d; %s'):format(
          agent.name,
          agent.agent,
          version,
          agent.protocol_version,
          agent.capabilities
        )
      )
    end
  end
  if settings.code_agent then
    health.info(('code_agent: %s writes the code of phases'):format(settings.code_agent))
  end
end

function M.check()
  health.start('loopr: Neovim')
  check_neovim()
  health.start('loopr: host binary')
  check_host()
  health.start('loopr: environment')
  check_provider()
  health.start('loopr: project rules')
  check_rules()
  health.start('loopr: storage')
  check_storage()
  health.start('loopr: sandbox')
  check_sandbox()
  health.start('loopr: MCP servers')
  check_mcp()
  health.start('loopr: coding agents (ACP)')
  check_agents()
end

return M

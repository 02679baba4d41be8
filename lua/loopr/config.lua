-- Option defaults and validation for `require('loopr').setup()`.

---@alias loopr.Layout "vsplit"|"split"|"tab"

---@class loopr.Price USD per million tokens.
---@field input number
---@field output number
---@field cache_write? number Defaults to input.
---@field cache_read? number Defaults to input.

---@class loopr.Budget
---@field tokens? integer Every token read or written, cached or not.
---@field usd? number Estimated from the prices; models without a price count nothing.
---@alias loopr.LogLevel "error"|"warn"|"info"|"debug"|"trace"
---@alias loopr.Level "plan"|"spec"|"phase"
---@alias loopr.ApprovalMode "ask"|"auto"

---@class loopr.Approvals
---@field write loopr.ApprovalMode Creating or overwriting a file.
---@field edit loopr.ApprovalMode Replacing text in a file.
---@field command loopr.ApprovalMode Running a shell command.
---@field fetch loopr.ApprovalMode Fetching a page with `web_fetch` from a host not in `web_fetch_allow_hosts`.
---@field mcp loopr.ApprovalMode Calling an MCP server's tool not in its `read_only_tools`.

---@class loopr.Sandbox
---@field mode "auto"|"bubblewrap"|"landlock"|"off" Which sandbox commands run in: "auto" is bubblewrap where it works, else Landlock with namespaces, else none.
---@field writable string[] Paths commands may write besides the project and /tmp.
---@field network boolean Whether commands may use the network.
---@field allow_git boolean Whether commands may write the project's .git.
---@field env string[] Environment variables passed to commands besides the defaults.

---@alias loopr.Provider "anthropic"|"openai"|"ollama"
---@alias loopr.ToolProtocol "native"|"xml"|"markdown"|"tool_calls"
---@alias loopr.ToolFormat "json"|"yaml"
---@alias loopr.ToolChoice "auto"|"required"

---@class loopr.Models Models per level; a level left out uses `model`.
---@field plan? string
---@field spec? string
---@field phase? string
---@field review? string Review passes of plans and specs.
---@field code? string

---@class loopr.McpServer
---@field command? string A program speaking MCP over stdio (started in the project root).
---@field args? string[]
---@field env? table<string, string> Variables for the command, besides the allow-listed ones.
---@field url? string A streamable HTTP server instead of a command.
---@field levels? ("plan"|"spec"|"phase"|"code")[] Loop levels offered its tools (default { "code" }).
---@field read_only_tools? string[] Tools that only read: planning levels get these, and they run without asking.
---@field timeout_secs? integer How long a call may take (default 60).

---@class loopr.Mcp
---@field servers? table<string, loopr.McpServer> By name, which prefixes the tools (`name__tool`).

---@class loopr.Config
---@field bin string|nil Path to the host binary; nil means auto-detect.
---@field provider loopr.Provider
---@field model string|nil nil: the provider's default (Ollama has none).
---@field models loopr.Models
---@field base_url string|nil nil: the provider's variable, else its default.
---@field api_key_env string|nil nil: the provider's usual key variable.
---@field num_ctx integer|nil Ollama's context window.
---@field max_parallel_requests integer|nil Requests to the model server at once (nil: 1 for a local server).
---@field tool_protocol loopr.ToolProtocol
---@field tool_format loopr.ToolFormat
---@field tool_choice loopr.ToolChoice|nil `tool_choice` sent with the tools (openai); nil: none is sent.
---@field stream boolean Whether answers stream as they are written (false: each comes whole).
---@field max_format_retries integer
---@field max_tokens integer|nil Longest answer in tokens; nil: fitted to a local server's context window, else 8192.
---@field max_turns integer
---@field context_budget integer|nil Estimated input tokens a request may reach before old tool results are shortened; nil: fitted to a local server's context window, else 100000.
---@field context_keep_turns integer Latest turns whose tool results are always sent whole.
---@field max_retries integer
---@field request_timeout_ms integer
---@field stream_idle_timeout_ms integer
---@field layout loopr.Layout
---@field log_level loopr.LogLevel
---@field log_file string
---@field root_markers string[]
---@field progress boolean
---@field review_gates loopr.Level[]
---@field max_concurrent_loops integer
---@field plan_review_passes integer
---@field spec_review boolean
---@field web_fetch boolean
---@field web_fetch_allow_hosts string[] Hosts fetched from without asking (`docs.rs`, `*.python.org`).
---@field resume boolean
---@field code_max_iterations integer
---@field validation_timeout_secs integer
---@field command_timeout_secs integer
---@field approvals loopr.Approvals
---@field allow_commands string[]
---@field deny_commands string[]|nil nil: the host's default list.
---@field secret_patterns string[]|nil nil: the host's default list.
---@field rules_files string[]|nil Project rules files read into every loop's system prompt; nil: the host's default list.
---@field rules_max_bytes integer Bytes of rules a system prompt takes at most.
---@field sandbox loopr.Sandbox
---@field mcp loopr.Mcp MCP servers whose tools loops are offered.
---@field prices table<string, loopr.Price>
---@field budget loopr.Budget

---@class loopr.Opts
---@field bin? string
---@field provider? loopr.Provider
---@field model? string
---@field models? loopr.Models
---@field base_url? string
---@field api_key_env? string
---@field num_ctx? integer
---@field max_parallel_requests? integer
---@field tool_protocol? loopr.ToolProtocol
---@field tool_format? loopr.ToolFormat
---@field tool_choice? loopr.ToolChoice
---@field stream? boolean
---@field max_format_retries? integer
---@field max_tokens? integer
---@field max_turns? integer
---@field context_budget? integer
---@field context_keep_turns? integer
---@field max_retries? integer
---@field request_timeout_ms? integer
---@field stream_idle_timeout_ms? integer
---@field layout? loopr.Layout
---@field log_level? loopr.LogLevel
---@field log_file? string
---@field root_markers? string[]
---@field progress? boolean
---@field review_gates? loopr.Level[]
---@field max_concurrent_loops? integer
---@field plan_review_passes? integer
---@field spec_review? boolean
---@field web_fetch? boolean
---@field web_fetch_allow_hosts? string[]
---@field resume? boolean
---@field code_max_iterations? integer
---@field validation_timeout_secs? integer
---@field command_timeout_secs? integer
---@field approvals? {write?: loopr.ApprovalMode, edit?: loopr.ApprovalMode, command?: loopr.ApprovalMode, fetch?: loopr.ApprovalMode}
---@field allow_commands? string[]
---@field deny_commands? string[]
---@field secret_patterns? string[]
---@field rules_files? string[]
---@field rules_max_bytes? integer
---@field sandbox? {mode?: "auto"|"bubblewrap"|"landlock"|"off", writable?: string[], network?: boolean, allow_git?: boolean, env?: string[]}
---@field prices? table<string, loopr.Price> USD per million tokens by model id (or its start), over the defaults.
---@field budget? loopr.Budget Per plan tree; reaching it pauses the tree until :LooprApprove.
---@field mcp? loopr.Mcp MCP servers whose tools loops are offered.

local M = {}

---@class loopr.OptSpec
---@field expect string Human readable description of the accepted values.
---@field check (fun(v: any): boolean)|type A |vim.validate()| validator: predicate or type name.
---@field default fun(): any
---@field merge? boolean A table value is merged into the default table (keys not given keep theirs).

---@param min integer
---@return fun(v: any): boolean
local function integer_at_least(min)
  return function(v)
    return type(v) == 'number' and v == math.floor(v) and v >= min and v < math.huge
  end
end

---@param min integer
---@param max integer
---@return fun(v: any): boolean
local function integer_between(min, max)
  return function(v)
    return integer_at_least(min)(v) and v <= max
  end
end

---@param choices string[]
---@return fun(v: any): boolean
local function one_of(choices)
  return function(v)
    return type(v) == 'string' and vim.tbl_contains(choices, v)
  end
end

---@param v any
---@return boolean
local function nonempty_string(v)
  return type(v) == 'string' and v ~= ''
end

---@param check fun(v: any): boolean
---@return fun(v: any): boolean
local function list_of(check)
  return function(v)
    if type(v) ~= 'table' or not vim.islist(v) then
      return false
    end
    for _, item in ipairs(v) do
      if not check(item) then
        return false
      end
    end
    return true
  end
end

---A table whose keys are among `fields`, each value accepted by its field's check.
---@param fields table<string, fun(v: any): boolean>
---@return fun(v: any): boolean
local function record_of(fields)
  return function(v)
    if type(v) ~= 'table' then
      return false
    end
    for key, item in pairs(v) do
      local check = fields[key]
      if not check or not check(item) then
        return false
      end
    end
    return true
  end
end

---A table whose keys are among `keys`, every value accepted by `check`.
---@param keys string[]
---@param check fun(v: any): boolean
---@return fun(v: any): boolean
local function map_of(keys, check)
  local fields = {}
  for _, key in ipairs(keys) do
    fields[key] = check
  end
  return record_of(fields)
end

---@param v any
---@return boolean
local function usd_amount(v)
  return type(v) == 'number' and v >= 0 and v < math.huge
end

---A model's price: `input` and `output` required, the cache prices optional.
---@param v any
---@return boolean
local function price(v)
  return type(v) == 'table'
    and v.input ~= nil
    and v.output ~= nil
    and record_of({ input = usd_amount, output = usd_amount, cache_write = usd_amount, cache_read = usd_amount })(v)
end

---@param v any
---@return boolean
local function prices(v)
  if type(v) ~= 'table' then
    return false
  end
  for model, p in pairs(v) do
    if not nonempty_string(model) or not price(p) then
      return false
    end
  end
  return true
end

---@param v any
---@return boolean
local function is_boolean(v)
  return type(v) == 'boolean'
end

---@param v any
---@return fun(): any
local function const(v)
  return function()
    return vim.deepcopy(v)
  end
end

---@type table<string, loopr.OptSpec>
local spec = {
  prices = {
    expect = 'a table of model id (or its start) = { input = n, output = n, cache_write = n, cache_read = n }, '
      .. 'USD per million tokens, each a number >= 0, the cache prices optional (they default to input), '
      .. "e.g. { ['claude-sonnet-4-5'] = { input = 3, output = 15 } }",
    check = prices,
    default = const({}),
  },
  budget = {
    expect = 'a table with tokens (an integer >= 1) and/or usd (a number > 0), e.g. { tokens = 2000000 } '
      .. 'or { usd = 5 }',
    check = record_of({
      tokens = integer_at_least(1),
      usd = function(v)
        return usd_amount(v) and v > 0
      end,
    }),
    default = const({}),
  },
  bin = { expect = 'a non-empty string or nil', check = nonempty_string, default = const(nil) },
  provider = {
    expect = 'one of "anthropic", "openai", "ollama"',
    check = one_of({ 'anthropic', 'openai', 'ollama' }),
    default = const('anthropic'),
  },
  -- nil: the host picks the provider's default model.
  model = { expect = 'a non-empty string', check = nonempty_string, default = const(nil) },
  models = {
    expect = 'a table with keys "plan", "spec", "phase", "review", "code", each a model name',
    check = map_of({ 'plan', 'spec', 'phase', 'review', 'code' }, nonempty_string),
    default = const({}),
  },
  base_url = { expect = 'a URL', check = nonempty_string, default = const(nil) },
  api_key_env = {
    expect = 'the name of an environment variable ending in _API_KEY',
    check = function(v)
      return type(v) == 'string' and v:match('^[%w_]+_API_KEY$') ~= nil
    end,
    default = const(nil),
  },
  num_ctx = { expect = 'an integer >= 1', check = integer_at_least(1), default = const(nil) },
  max_parallel_requests = { expect = 'an integer >= 1', check = integer_at_least(1), default = const(nil) },
  tool_protocol = {
    expect = 'one of "native", "xml", "markdown", "tool_calls"',
    check = one_of({ 'native', 'xml', 'markdown', 'tool_calls' }),
    default = const('native'),
  },
  tool_format = { expect = 'one of "json", "yaml"', check = one_of({ 'json', 'yaml' }), default = const('json') },
  -- nil: no tool_choice is sent, which leaves the choice to the model.
  tool_choice = {
    expect = 'one of "auto", "required"',
    check = one_of({ 'auto', 'required' }),
    default = const(nil),
  },
  stream = { expect = 'a boolean', check = 'boolean', default = const(true) },
  max_format_retries = { expect = 'an integer >= 0', check = integer_at_least(0), default = const(3) },
  -- nil: the host fits it to a local server's context window, else uses its default (8192).
  max_tokens = { expect = 'an integer >= 1', check = integer_at_least(1), default = const(nil) },
  max_turns = { expect = 'an integer >= 1', check = integer_at_least(1), default = const(25) },
  -- The host's minimum: below it the system prompt and tools leave no room for a conversation.
  -- nil: the host fits it to a local server's context window, else uses its default (100000).
  context_budget = {
    expect = 'an integer >= 1024 (tokens)',
    check = integer_at_least(1024),
    default = const(nil),
  },
  context_keep_turns = { expect = 'an integer >= 1', check = integer_at_least(1), default = const(3) },
  max_retries = { expect = 'an integer >= 0', check = integer_at_least(0), default = const(2) },
  request_timeout_ms = { expect = 'an integer >= 1', check = integer_at_least(1), default = const(600000) },
  stream_idle_timeout_ms = { expect = 'an integer >= 1', check = integer_at_least(1), default = const(90000) },
  layout = {
    expect = 'one of "vsplit", "split", "tab"',
    check = one_of({ 'vsplit', 'split', 'tab' }),
    default = const('vsplit'),
  },
  log_level = {
    expect = 'one of "error", "warn", "info", "debug", "trace"',
    check = one_of({ 'error', 'warn', 'info', 'debug', 'trace' }),
    default = const('info'),
  },
  log_file = {
    expect = 'a non-empty string',
    check = nonempty_string,
    default = function()
      return vim.fs.joinpath(vim.fn.stdpath('log') --[[@as string]], 'loopr.log')
    end,
  },
  root_markers = { expect = 'a list of strings', check = list_of(nonempty_string), default = const({ '.git' }) },
  progress = { expect = 'a boolean', check = 'boolean', default = const(true) },
  review_gates = {
    expect = 'a list of "plan", "spec", "phase"',
    check = list_of(one_of({ 'plan', 'spec', 'phase' })),
    default = const({ 'plan' }),
  },
  max_concurrent_loops = { expect = 'an integer >= 1', check = integer_at_least(1), default = const(4) },
  plan_review_passes = { expect = 'an integer from 0 to 5', check = integer_between(0, 5), default = const(5) },
  spec_review = { expect = 'a boolean', check = 'boolean', default = const(true) },
  web_fetch = { expect = 'a boolean', check = 'boolean', default = const(false) },
  web_fetch_allow_hosts = { expect = 'a list of host names', check = list_of(nonempty_string), default = const({}) },
  resume = { expect = 'a boolean', check = 'boolean', default = const(true) },
  code_max_iterations = { expect = 'an integer >= 1', check = integer_at_least(1), default = const(5) },
  validation_timeout_secs = { expect = 'an integer >= 1', check = integer_at_least(1), default = const(600) },
  command_timeout_secs = { expect = 'an integer >= 1', check = integer_at_least(1), default = const(120) },
  approvals = {
    expect = 'a table with keys "write", "edit", "command", "fetch", "mcp", each "ask" or "auto"',
    check = map_of({ 'write', 'edit', 'command', 'fetch', 'mcp' }, one_of({ 'ask', 'auto' })),
    default = const({ write = 'ask', edit = 'ask', command = 'ask', fetch = 'ask', mcp = 'ask' }),
    merge = true,
  },
  allow_commands = { expect = 'a list of regular expressions', check = list_of(nonempty_string), default = const({}) },
  -- nil: the host's defaults apply (they are not repeated here).
  deny_commands = { expect = 'a list of regular expressions', check = list_of(nonempty_string), default = const(nil) },
  secret_patterns = { expect = 'a list of globs', check = list_of(nonempty_string), default = const(nil) },
  rules_files = {
    expect = 'a list of paths relative to the project root',
    check = list_of(nonempty_string),
    default = const(nil),
  },
  rules_max_bytes = { expect = 'an integer >= 0', check = integer_at_least(0), default = const(32768) },
  mcp = {
    expect = 'a table { servers = { <name> = { command = "prog", args = { ... }, env = { NAME = "value" } } '
      .. 'or { url = "http://..." }, with optional levels (a list of "plan", "spec", "phase", "code"), '
      .. 'read_only_tools (a list of tool names), timeout_secs (an integer >= 1) } }, names of '
      .. 'letters, digits, "-" and "_"',
    check = record_of({
      servers = function(servers)
        if type(servers) ~= 'table' then
          return false
        end
        for name, server in pairs(servers) do
          if type(name) ~= 'string' or not name:match('^[%w_-]+$') or type(server) ~= 'table' then
            return false
          end
          local ok = record_of({
            command = nonempty_string,
            args = list_of(function(v)
              return type(v) == 'string'
            end),
            env = function(env)
              if type(env) ~= 'table' then
                return false
              end
              for k, v in pairs(env) do
                if type(k) ~= 'string' or type(v) ~= 'string' then
                  return false
                end
              end
              return true
            end,
            url = nonempty_string,
            levels = list_of(one_of({ 'plan', 'spec', 'phase', 'code' })),
            read_only_tools = list_of(nonempty_string),
            timeout_secs = integer_at_least(1),
          })(server)
          if not ok or (server.command == nil) == (server.url == nil) then
            return false
          end
        end
        return true
      end,
    }),
    default = const({}),
  },
  sandbox = {
    expect = 'a table with keys mode ("auto", "bubblewrap", "off"), writable (a list of absolute '
      .. 'paths), network (a boolean), allow_git (a boolean), env (a list of variable names)',
    check = record_of({
      mode = one_of({ 'auto', 'bubblewrap', 'landlock', 'off' }),
      writable = list_of(nonempty_string),
      network = is_boolean,
      allow_git = is_boolean,
      env = list_of(nonempty_string),
    }),
    default = const({ mode = 'auto', writable = {}, network = false, allow_git = false, env = {} }),
    merge = true,
  },
}

---@type loopr.Opts
local user_opts = {}
---Whether setup() has stored options; callbacks waiting for that.
local configured = false

-- What get() and settings() return, made once per setup(): building them merges and copies
-- every option, which the first command of a session would block Neovim for several times.
---@type loopr.Config|nil
local resolved = nil
---@type table<string, any>|nil
local host_settings = nil
---@type fun()[]
local waiting = {}

---Sorted option names.
---@return string[]
function M.keys()
  local keys = vim.tbl_keys(spec)
  table.sort(keys)
  return keys
end

---`vim.validate` of one value: the 0.11 form where it exists, else the table form of 0.10
---(deprecated since 0.11).
---@param name string
---@param value any
---@param check (fun(v: any): boolean)|type
---@param expect string
---@return boolean ok
local function validate(name, value, check, expect)
  if vim.fn.has('nvim-0.11') == 1 then
    return (pcall(vim.validate, name, value, check, expect))
  end
  return (pcall(vim.validate, { [name] = { value, check, expect } }))
end

---Check user options without storing them.
---@param opts any
---@return boolean ok
---@return string|nil err Message naming the offending option and what it expects, prefixed
---"Loopr: ".
function M.validate(opts)
  if opts == nil then
    return true
  end
  if not validate('opts', opts, function(v)
    return type(v) == 'table'
  end, 'a table or nil') then
    return false, ('Loopr: setup() expects a table or nil, got %s'):format(vim.inspect(opts))
  end
  local keys = vim.tbl_keys(opts)
  table.sort(keys, function(a, b)
    return tostring(a) < tostring(b)
  end)
  for _, key in ipairs(keys) do
    local s = spec[key]
    if not s then
      return false,
        ('Loopr: setup(): unknown option %s (valid options: %s)'):format(vim.inspect(key), table.concat(M.keys(), ', '))
    end
    local value = opts[key]
    if not validate(key, value, s.check, s.expect) then
      return false,
        ('Loopr: setup(): option %s expects %s, got %s (%s)'):format(key, s.expect, vim.inspect(value), type(value))
    end
  end
  return true
end

---Validate and store options; the latest call replaces earlier ones.
---@param opts loopr.Opts|nil
---@return boolean ok
---@return string|nil err
function M.setup(opts)
  local ok, err = M.validate(opts)
  if not ok then
    return false, err
  end
  user_opts = vim.deepcopy(opts or {})
  resolved, host_settings = nil, nil
  configured = true
  local callbacks = waiting
  waiting = {}
  for _, callback in ipairs(callbacks) do
    vim.schedule(callback)
  end
  return true
end

---Whether setup() has stored options.
---@return boolean
function M.configured()
  return configured
end

---Run `fn` once setup() has stored options: now if it has, else after the next setup(), or
---after `timeout_ms` without one (setup() is optional). Runs `fn` at most once.
---@param fn fun()
---@param timeout_ms integer
function M.when_configured(fn, timeout_ms)
  if configured then
    fn()
    return
  end
  local done = false
  local function once()
    if not done then
      done = true
      fn()
    end
  end
  table.insert(waiting, once)
  vim.defer_fn(once, timeout_ms)
end

---Current effective configuration (defaults merged with the latest setup()). Shared until the
---next setup(): read it, never modify it.
---@return loopr.Config
function M.get()
  if resolved then
    return resolved
  end
  local cfg = {}
  for key, s in pairs(spec) do
    local v = user_opts[key]
    if v == nil then
      v = s.default()
    elseif s.merge then
      v = vim.tbl_extend('force', s.default(), v)
    end
    cfg[key] = vim.deepcopy(v)
  end
  resolved = cfg
  return cfg
end

---Settings forwarded to the host with each `plan` and `run` request. Left out where the
---host's default applies: unset `deny_commands` and `secret_patterns`, and `approvals` equal
---to the default (the same as the host's). Shared until the next setup(): read it, never
---modify it.
---@return table<string, any>
function M.settings()
  if host_settings then
    return host_settings
  end
  local c = M.get()
  local approvals = not vim.deep_equal(c.approvals, spec.approvals.default()) and c.approvals or nil
  host_settings = {
    provider = c.provider,
    model = c.model,
    models = next(c.models) and c.models or nil,
    base_url = c.base_url,
    api_key_env = c.api_key_env,
    num_ctx = c.num_ctx,
    max_parallel_requests = c.max_parallel_requests,
    tool_protocol = c.tool_protocol,
    tool_format = c.tool_format,
    tool_choice = c.tool_choice,
    stream = c.stream,
    max_format_retries = c.max_format_retries,
    max_tokens = c.max_tokens,
    max_turns = c.max_turns,
    context_budget = c.context_budget,
    context_keep_turns = c.context_keep_turns,
    max_retries = c.max_retries,
    request_timeout_ms = c.request_timeout_ms,
    stream_idle_timeout_ms = c.stream_idle_timeout_ms,
    review_gates = c.review_gates,
    max_concurrent_loops = c.max_concurrent_loops,
    plan_review_passes = c.plan_review_passes,
    spec_review = c.spec_review,
    web_fetch = c.web_fetch,
    web_fetch_allow_hosts = c.web_fetch_allow_hosts,
    code_max_iterations = c.code_max_iterations,
    validation_timeout_secs = c.validation_timeout_secs,
    command_timeout_secs = c.command_timeout_secs,
    approvals = approvals,
    sandbox = c.sandbox,
    allow_commands = c.allow_commands,
    deny_commands = c.deny_commands,
    secret_patterns = c.secret_patterns,
    rules_files = c.rules_files,
    rules_max_bytes = c.rules_max_bytes,
    -- Empty tables are left out: msgpack cannot tell an empty map from an empty list.
    prices = next(c.prices) and c.prices or nil,
    budget = next(c.budget) and c.budget or nil,
    mcp = M.mcp_settings(c.mcp),
  }
  return host_settings
end

---The `mcp` option as the host reads it: empty tables left out (msgpack cannot tell an
---empty map from an empty list), nil without servers.
---@param mcp table
---@return table|nil
function M.mcp_settings(mcp)
  if not mcp.servers or next(mcp.servers) == nil then
    return nil
  end
  local servers = {}
  for name, server in pairs(mcp.servers) do
    local copy = {}
    for key, value in pairs(server) do
      if type(value) ~= 'table' or next(value) ~= nil then
        copy[key] = value
      end
    end
    servers[name] = copy
  end
  return { servers = servers }
end

---Project root per `root_markers`, else the cwd; symlinks resolved. The current buffer's
---file decides, except in buffers that are no project file (artifacts under `$LOOPR_HOME`,
---the status buffer, any buffer with a 'buftype'), where the cwd does.
---@return string
function M.root()
  local markers = M.get().root_markers
  local cwd = vim.fn.getcwd()
  local foreign = vim.bo.buftype ~= '' or require('loopr.paths').under_home(vim.api.nvim_buf_get_name(0))
  local root = nil
  if #markers > 0 then
    root = vim.fs.root(foreign and cwd or 0, markers)
  end
  root = root or cwd
  return vim.uv.fs_realpath(root) or root
end

return M

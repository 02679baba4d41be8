-- Option defaults and validation for `require('loopr').setup()`. The options themselves
-- (names, descriptions, what each expects, its check, its default, whether the host gets
-- it) are generated from the host's definitions into `loopr.generated.options`; this module
-- only interprets them. Their types are in `lua/loopr/generated/types.lua`.

local M = {}

---@class loopr.Check What a value must be (`kind` and its limits), as the host defines it.
---@field kind "boolean"|"integer"|"number"|"string"|"one_of"|"list"|"record"|"map"|"any"
---@field min? number
---@field max? number
---@field above? number A number must be greater than this.
---@field nonempty? boolean
---@field pattern? string A regular expression the whole string matches.
---@field values? string[] For one_of.
---@field item? loopr.Check For list.
---@field fields? table<string, loopr.Check> For record: its keys.
---@field required? string[] For record: keys it must have.
---@field exactly_one_of? string[] For record: keys of which it must have one.
---@field switch? string For record: the boolean key a boolean given for the table sets.
---@field key? loopr.Check For map.
---@field value? loopr.Check For map.

---@class loopr.OptionSpec
---@field description? string
---@field expect string Human readable description of the accepted values.
---@field check loopr.Check
---@field default? any nil: none, or the host's.
---@field default_stdpath? string[] The default is this file under |stdpath()| of this kind.
---@field merge? boolean A table value is merged into the default table (keys not given keep theirs).
---@field host? boolean The host gets it with each request.

---@type table<string, loopr.OptionSpec>
local options = require('loopr.generated.options')

---@param v any
---@return boolean
local function is_number(v)
  return type(v) == 'number' and v == v and v < math.huge and v > -math.huge
end

local accepts

---@type table<string, fun(check: loopr.Check, v: any): boolean>
local kinds = {
  boolean = function(_, v)
    return type(v) == 'boolean'
  end,
  integer = function(check, v)
    return is_number(v)
      and v == math.floor(v)
      and (check.min == nil or v >= check.min)
      and (check.max == nil or v <= check.max)
  end,
  number = function(check, v)
    return is_number(v)
      and (check.min == nil or v >= check.min)
      and (check.above == nil or v > check.above)
      and (check.max == nil or v <= check.max)
  end,
  string = function(check, v)
    if type(v) ~= 'string' or (check.nonempty and v == '') then
      return false
    end
    -- \v: the operators of the host's regular expressions; \C: case matters.
    return check.pattern == nil or vim.regex([[\v\C]] .. check.pattern):match_str(v) ~= nil
  end,
  one_of = function(check, v)
    return type(v) == 'string' and vim.tbl_contains(check.values, v)
  end,
  list = function(check, v)
    if type(v) ~= 'table' or not vim.islist(v) then
      return false
    end
    for _, item in ipairs(v) do
      if not accepts(check.item, item) then
        return false
      end
    end
    return true
  end,
  record = function(check, v)
    if type(v) == 'boolean' and check.switch then
      return true
    end
    if type(v) ~= 'table' then
      return false
    end
    for key, item in pairs(v) do
      local field = check.fields[key]
      if not field or not accepts(field, item) then
        return false
      end
    end
    for _, key in ipairs(check.required or {}) do
      if v[key] == nil then
        return false
      end
    end
    if check.exactly_one_of then
      local given = 0
      for _, key in ipairs(check.exactly_one_of) do
        given = given + (v[key] ~= nil and 1 or 0)
      end
      if given ~= 1 then
        return false
      end
    end
    return true
  end,
  map = function(check, v)
    if type(v) ~= 'table' then
      return false
    end
    for key, item in pairs(v) do
      if not accepts(check.key, key) or not accepts(check.value, item) then
        return false
      end
    end
    return true
  end,
  any = function()
    return true
  end,
}

---Whether `v` is what `check` describes.
---@param check loopr.Check
---@param v any
---@return boolean
accepts = function(check, v)
  return kinds[check.kind](check, v)
end

---The default of an option, a fresh copy.
---@param option loopr.OptionSpec
---@return any
local function default_of(option)
  if option.default_stdpath then
    local kind, file = option.default_stdpath[1], option.default_stdpath[2]
    return vim.fs.joinpath(vim.fn.stdpath(kind) --[[@as string]], file)
  end
  return vim.deepcopy(option.default)
end

---A copy of `v` without its empty tables, at any depth: msgpack cannot tell an empty map
---from an empty list, so an empty table is left for the host's default.
---@param v any
---@return any
local function without_empty_tables(v)
  if type(v) ~= 'table' then
    return v
  end
  local copy = {}
  for key, item in pairs(v) do
    item = without_empty_tables(item)
    if type(item) ~= 'table' or next(item) ~= nil then
      copy[key] = item
    end
  end
  return copy
end

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
  local keys = vim.tbl_keys(options)
  table.sort(keys)
  return keys
end

---Edits (insertions, deletions, substitutions) that turn `a` into `b`.
---@param a string
---@param b string
---@return integer
local function edit_distance(a, b)
  local previous = {}
  for j = 0, #b do
    previous[j] = j
  end
  for i = 1, #a do
    local current = { [0] = i }
    for j = 1, #b do
      local substitution = previous[j - 1] + (a:byte(i) == b:byte(j) and 0 or 1)
      current[j] = math.min(previous[j] + 1, current[j - 1] + 1, substitution)
    end
    previous = current
  end
  return previous[#b]
end

---The option name closest to `name` when it is close enough to be a typo of it.
---@param name string
---@return string|nil
local function closest_option(name)
  local best, best_distance = nil, math.huge
  for _, key in ipairs(M.keys()) do
    local distance = edit_distance(name, key)
    if distance < best_distance then
      best, best_distance = key, distance
    end
  end
  -- Close enough: a slip of a key or two, or of a third of a long name.
  if best_distance <= math.max(2, math.floor(#name / 3)) then
    return best
  end
end

---@class loopr.OptionProblem
---@field message string What is wrong, "Loopr: " first; the part that matters comes first.
---@field details string[] More for |:messages|, shown before `message`.

---The options of `opts` that are valid and what is wrong with each of the others.
---@param opts table
---@return table<string, any> valid
---@return loopr.OptionProblem[] problems In the order of the option names.
local function sort_out(opts)
  local keys = vim.tbl_keys(opts)
  table.sort(keys, function(a, b)
    return tostring(a) < tostring(b)
  end)
  local valid, problems = {}, {}
  for _, key in ipairs(keys) do
    local option = options[key]
    local value = opts[key]
    if not option then
      local list = ('Loopr: setup(): unknown option %s (valid options: %s)'):format(
        vim.inspect(key),
        table.concat(M.keys(), ', ')
      )
      local closest = type(key) == 'string' and closest_option(key) or nil
      local message = closest
          and ('Loopr: setup(): unknown option %s; did you mean %s?'):format(vim.inspect(key), vim.inspect(closest))
        or ('Loopr: setup(): unknown option %s ignored; see :help loopr-options'):format(vim.inspect(key))
      table.insert(problems, { message = message, details = { list } })
    elseif not accepts(option.check, value) then
      local message = ('Loopr: setup(): option %s expects %s, got %s (%s)'):format(
        key,
        option.expect,
        vim.inspect(value),
        type(value)
      )
      table.insert(problems, { message = message, details = {} })
    else
      valid[key] = value
    end
  end
  return valid, problems
end

---Check user options without storing them.
---@param opts any
---@return boolean ok
---@return string|nil err Message naming the first offending option and what it expects,
---prefixed "Loopr: ".
function M.validate(opts)
  if opts == nil then
    return true
  end
  if type(opts) ~= 'table' then
    return false, ('Loopr: setup() expects a table or nil, got %s'):format(vim.inspect(opts))
  end
  local _, problems = sort_out(opts)
  if #problems > 0 then
    return false, problems[1].message
  end
  return true
end

---Store options; the latest call replaces earlier ones. A call with mistakes changes only
---what it names correctly: its valid options apply over those in effect, and an unknown or
---ill-typed one leaves things as they were (at the first call, the defaults).
---@param opts loopr.Opts|nil
---@return boolean ok Whether every option was valid.
---@return string|nil err The mistakes, one a line.
---@return string[] report What to tell the user, in order: details, then each mistake.
function M.setup(opts)
  if opts ~= nil and type(opts) ~= 'table' then
    local _, err = M.validate(opts)
    return false, err, { err }
  end
  local valid, problems = sort_out(opts or {})
  if #problems == 0 then
    user_opts = vim.deepcopy(valid)
  else
    user_opts = vim.tbl_extend('force', user_opts, vim.deepcopy(valid))
  end
  resolved, host_settings = nil, nil
  configured = true
  local callbacks = waiting
  waiting = {}
  for _, callback in ipairs(callbacks) do
    vim.schedule(callback)
  end
  if #problems == 0 then
    return true, nil, {}
  end
  local report, messages = {}, {}
  for _, problem in ipairs(problems) do
    vim.list_extend(report, problem.details)
    table.insert(messages, problem.message)
  end
  -- The short messages last: the command line shows the last one.
  vim.list_extend(report, messages)
  return false, table.concat(messages, '\n'), report
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
  for key, option in pairs(options) do
    local v = user_opts[key]
    if type(v) == 'boolean' and option.check.switch then
      -- `verify = false` is `verify = { enabled = false }`.
      v = { [option.check.switch] = v }
    end
    if v == nil then
      v = default_of(option)
    elseif option.merge then
      v = vim.tbl_extend('force', default_of(option), v)
    end
    cfg[key] = vim.deepcopy(v)
  end
  resolved = cfg
  return cfg
end

---Settings forwarded to the host with each `plan` and `run` request: the options the host
---gets, each left out where the host's default applies (unset, a table equal to its
---default, a table of keys left empty once its empty tables are left out). Shared until the
---next setup(): read it, never modify it.
---@return table<string, any>
function M.settings()
  if host_settings then
    return host_settings
  end
  local c = M.get()
  host_settings = {}
  for key, option in pairs(options) do
    local v = c[key]
    if option.host and type(v) == 'table' then
      local keyed = option.check.kind == 'record' or option.check.kind == 'map'
      if vim.deep_equal(v, option.default) then
        v = nil
      elseif keyed then
        v = without_empty_tables(v)
        v = next(v) ~= nil and v or nil
      end
    end
    if option.host then
      host_settings[key] = v
    end
  end
  return host_settings
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

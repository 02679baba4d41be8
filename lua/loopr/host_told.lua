-- What the running host has been told since it started: the provider variables of Neovim's
-- environment, the setup()'s budget and prices, its MCP servers; and sending what changed.
-- One record per host, so a new host is told everything anew.

local config = require('loopr.config')

local M = {}

---@class loopr.Told
---@field environ string A fingerprint of Neovim's environment when the host started with it.
---@field provider_variables loopr.ProviderVariables|nil Which variables the host reads, once asked.
---@field credentials loopr.Credentials|nil The provider variables last sent, nil before.
---@field budget string|nil The budget and prices last sent (as text), nil before.
---@field mcp string|nil A fingerprint of the MCP servers last sent, nil before.

---@class loopr.Credentials
---@field fingerprint string Of the provider variables, so this table holds no copy of a key.

---Two FNV-1a hashes (32 bits each, different offset bases) and the length of `text`. Not
---`vim.fn.sha256`: its first call in a session takes milliseconds, which the first command
---would block Neovim for; this only tells whether the variables changed.
---@param text string
---@return string
local function fingerprint(text)
  local bit = require('bit')
  ---One FNV-1a step: times the prime 2^24 + 2^8 + 0x93 as shifts, whose sum a double holds
  ---exactly before it is cut to 32 bits.
  local function step(hash, byte)
    hash = bit.bxor(hash, byte)
    return bit.tobit(
      hash
        + bit.lshift(hash, 1)
        + bit.lshift(hash, 4)
        + bit.lshift(hash, 7)
        + bit.lshift(hash, 8)
        + bit.lshift(hash, 24)
    )
  end
  local first, second = 0x811c9dc5, 0x01000193
  for index = 1, #text do
    local byte = text:byte(index)
    first, second = step(first, byte), step(second, byte)
  end
  return ('%s:%s:%d'):format(bit.tohex(first), bit.tohex(second), #text)
end

---Whether `name` is a provider variable, as the host said which are.
---@param name string
---@param known loopr.ProviderVariables
---@return boolean
local function is_provider_variable(name, known)
  for _, suffix in ipairs(known.suffixes) do
    if name:sub(-#suffix) == suffix then
      return true
    end
  end
  return vim.tbl_contains(known.names, name)
end

---The provider variables in `environ` (Neovim's environment now: `:let $OPENAI_API_KEY = ...`
---changes it after the host started, which the host's own environment never sees).
---@param environ table<string, string>
---@param known loopr.ProviderVariables Which variables they are, as the host said.
---@return table<string, string> variables
---@return loopr.Credentials
local function provider_env(environ, known)
  local variables, lines = vim.empty_dict(), {}
  for name, value in pairs(environ) do
    if is_provider_variable(name, known) and vim.trim(value) ~= '' then
      variables[name] = value
      lines[#lines + 1] = name .. '=' .. value
    end
  end
  table.sort(lines)
  return variables, { fingerprint = fingerprint(table.concat(lines, '\n')) }
end

---A fingerprint of the whole of `environ`: until the host said which variables are the
---providers', a change of any of them is a change of the environment.
---@param environ table<string, string>
---@return string
local function environ_fingerprint(environ)
  local lines = {}
  for name, value in pairs(environ) do
    lines[#lines + 1] = name .. '=' .. value
  end
  table.sort(lines)
  return fingerprint(table.concat(lines, '\n'))
end

---Pass the provider variables to the host on `chan` when they changed since it got them. A
---notification: the host applies it before it reads the request sent after it. Which
---variables they are, only the host knows: it is asked (once per host, and only once the
---environment changed since it started, so a request that follows never waits for a host
---starting up).
---@param told loopr.Told
---@param chan integer
---@return boolean ok
---@return any err The rpcnotify error when not ok.
local function send_changed_credentials(told, chan)
  local environ = vim.fn.environ()
  if not told.provider_variables then
    if told.environ == environ_fingerprint(environ) then
      -- The host started with this environment.
      return true
    end
    local ok, known = pcall(vim.rpcrequest, chan, 'provider_variables', vim.empty_dict())
    if not ok then
      return false, known
    end
    told.provider_variables = known
  end
  local variables, current = provider_env(environ, told.provider_variables)
  local sent = told.credentials
  if sent and sent.fingerprint == current.fingerprint then
    return true
  end
  local ok, err = pcall(vim.rpcnotify, chan, 'credentials', { env = variables })
  if ok then
    told.credentials = current
  end
  return ok, err
end

---Notify the host on `chan` of `method` with `params`, unless `sent` (what stands for them) is
---what it got last under that name.
---@param told loopr.Told
---@param chan integer
---@param method 'budget'|'mcp'
---@param params table
---@param sent string
---@return boolean ok
---@return any err The rpcnotify error when not ok.
local function notify_changed(told, chan, method, params, sent)
  if told[method] == sent then
    return true
  end
  local ok, err = pcall(vim.rpcnotify, chan, method, params)
  if ok then
    told[method] = sent
  end
  return ok, err
end

---Pass the setup()'s budget and prices to the host on `chan` when they changed since it got
---them (nothing before the first setup()): it holds every plan tree to them from then on
---(|loopr-option-budget|). A notification the host applies before it reads the request sent
---after it.
---@param told loopr.Told
---@param chan integer
---@return boolean ok
---@return any err The rpcnotify error when not ok.
function M.send_changed_budget(told, chan)
  if not config.configured() then
    -- Without a setup() the host holds each tree to the budget its loops started with.
    return true
  end
  local settings = config.settings()
  local params = { budget = settings.budget, prices = settings.prices }
  if next(params) == nil then
    params = vim.empty_dict()
  end
  -- vim.inspect orders keys, so equal tables give equal text.
  return notify_changed(told, chan, 'budget', params, vim.inspect(params))
end

---Pass the setup()'s MCP servers to the host on `chan` when they changed since it got them
---(nothing before the first setup()): every loop, a resumed one too, takes its servers' `env`
---values (tokens) from them, since none is stored with a loop (|loopr-mcp|). A notification
---the host applies before it reads the request sent after it.
---@param told loopr.Told
---@param chan integer
---@return boolean ok
---@return any err The rpcnotify error when not ok.
local function send_changed_mcp(told, chan)
  if not config.configured() then
    return true
  end
  local mcp = config.settings().mcp or { servers = vim.empty_dict() }
  -- A fingerprint, so that the state holds no copy of a token.
  return notify_changed(told, chan, 'mcp', mcp, fingerprint(vim.inspect(mcp)))
end

---Send changed provider variables, then a changed budget and MCP servers, to the host on
---`chan`.
---@param told loopr.Told
---@param chan integer
---@return boolean ok
---@return any err The rpcnotify error when not ok.
function M.send_changed(told, chan)
  local ok, err = send_changed_credentials(told, chan)
  if ok then
    ok, err = M.send_changed_budget(told, chan)
  end
  if ok then
    ok, err = send_changed_mcp(told, chan)
  end
  return ok, err
end

---What a host started now, with Neovim's environment as it is, has been told.
---@return loopr.Told
function M.at_start()
  return { environ = environ_fingerprint(vim.fn.environ()) }
end

return M

-- Whether a host binary may run with this plugin: the host's `hello` (its version and wire
-- protocol) judged against `lua/loopr/generated/version.lua`, the words that refuse it, the
-- binaries refused until they change, and where a binary comes from (for :checkhealth).

local M = {}

---How long starting the host waits for its `hello` (it answers at once; a binary that is not
---a Loopr host may never answer).
M.HELLO_WAIT_MS = 5000

---@class loopr.HostVersion
---@field version string
---@field protocol integer|nil Nil when the host does not say it (older than the check).

---The version and protocol this plugin speaks, read at each call.
---@return loopr.Version
function M.expected()
  return require('loopr.generated.version')
end

---`0.1.0 (protocol 1)`.
---@param reported loopr.HostVersion
---@return string
function M.describe(reported)
  if reported.protocol == nil then
    return ('%s (no protocol said)'):format(reported.version)
  end
  return ('%s (protocol %s)'):format(reported.version, reported.protocol)
end

---Whether a host that reported `reported` speaks this plugin's protocol.
---@param reported loopr.HostVersion
---@return boolean
function M.matches(reported)
  return reported.protocol == M.expected().protocol
end

---The three ways to a matching host, for messages and :checkhealth.
---@param root string The plugin's root, where a source build runs.
---@return string[]
function M.fixes(root)
  return {
    ':LooprInstall installs the host of this plugin',
    ('or rebuild it: `cargo build --release` in %s'):format(root),
    'or set the `bin` option to a host of the same protocol',
  }
end

---What refuses host `bin`, which reported `reported` (nil: it did not say, being older).
---@param bin string
---@param reported loopr.HostVersion|nil
---@param root string
---@return string
function M.refusal(bin, reported, root)
  local host = reported and ('is %s'):format(M.describe(reported)) or 'does not say its version (it is older)'
  return ('Loopr: the host %s %s, but this plugin is %s, so it is not run. Run :LooprInstall, or rebuild it with `cargo build --release` in %s, or set the `bin` option to a matching host.'):format(
    bin,
    host,
    M.describe(M.expected()),
    root
  )
end

---What a file is, so a changed binary (rebuilt, installed anew) is told from the one refused.
---@param path string
---@return string|nil
local function identity(path)
  local stat = vim.uv.fs_stat(path)
  if not stat then
    return nil
  end
  return ('%d:%d:%d.%d'):format(stat.ino, stat.size, stat.mtime.sec, stat.mtime.nsec)
end

---Binaries refused, by path: the file as it was and the message.
---@type table<string, { identity: string|nil, message: string }>
local refused = {}

---Remember that `bin` was refused with `message`, until the file changes.
---@param bin string
---@param message string
function M.remember(bin, message)
  refused[bin] = { identity = identity(bin), message = message }
end

---The message `bin` was refused with, while it is the same file; nil otherwise.
---@param bin string
---@return string|nil
function M.refused(bin)
  local entry = refused[bin]
  if entry and entry.identity == identity(bin) then
    return entry.message
  end
  refused[bin] = nil
  return nil
end

---Whether two paths name the same file.
---@param a string
---@param b string
---@return boolean
local function same_file(a, b)
  local real_a, real_b = vim.uv.fs_realpath(a), vim.uv.fs_realpath(b)
  return real_a ~= nil and real_a == real_b
end

---What `bin/install.json` says of the installed host, in words.
---@param record_path string
---@return string
local function installed_words(record_path)
  local ok, record = pcall(function()
    return vim.json.decode(table.concat(vim.fn.readfile(record_path), '\n'))
  end)
  if not ok or type(record) ~= 'table' then
    return 'installed in bin/ (no readable bin/install.json)'
  end
  local kind = record.from == 'release' and 'an installed release' or 'an installed source build'
  local details = {}
  for _, key in ipairs({ 'version', 'target', 'reason' }) do
    if type(record[key]) == 'string' then
      details[#details + 1] = ('%s %s'):format(key, record[key])
    end
  end
  return #details > 0 and ('%s: %s'):format(kind, table.concat(details, ', ')) or kind
end

---Where host binary `bin` comes from, as the lookup found it.
---@param bin string
---@param bin_option string|nil The `bin` option.
---@param root string The plugin's root.
---@return string
function M.origin(bin, bin_option, root)
  if bin_option then
    return 'the `bin` option'
  end
  if same_file(bin, vim.fs.joinpath(root, 'bin', 'loopr')) then
    return installed_words(vim.fs.joinpath(root, 'bin', 'install.json'))
  end
  for _, profile in ipairs({ 'release', 'debug' }) do
    if same_file(bin, vim.fs.joinpath(root, 'target', profile, 'loopr')) then
      return ('a cargo build in target/%s'):format(profile)
    end
  end
  return 'found on PATH'
end

---What `loopr --version` printed, read: `loopr 0.1.0 (protocol 1)`; an older host prints no
---protocol.
---@param output string
---@return loopr.HostVersion|nil
function M.parse_version_line(output)
  local version, protocol = output:match('^loopr (%S+) %(protocol (%d+)%)')
  if version then
    return { version = version, protocol = tonumber(protocol) }
  end
  version = output:match('^loopr (%S+)')
  return version and { version = version } or nil
end

return M

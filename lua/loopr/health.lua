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

local function check_host()
  local host = require('loopr.host')
  local bin, err = host.resolve_bin()
  if not bin then
    health.error(require('loopr.notify').prefixed(err or 'host binary not found'))
    return
  end
  health.ok('host binary: ' .. bin)
  local ok, res = pcall(function()
    return vim.system({ bin, '--version' }, { text = true }):wait(5000)
  end)
  if not ok then
    health.error(('`%s --version` could not run: %s'):format(bin, res))
  elseif res.code ~= 0 then
    health.error(
      ('`%s --version` failed (exit %d)'):format(bin, res.code),
      { vim.trim(res.stderr or ''), 'Rebuild with `cargo build --release` in ' .. host.plugin_root() }
    )
  elseif vim.trim(res.stdout or '') == '' then
    health.warn(
      ('`%s --version` printed nothing'):format(bin),
      { 'Rebuild with `cargo build --release` in ' .. host.plugin_root() }
    )
  else
    health.ok('host version: ' .. vim.trim(res.stdout))
  end
  if host.chan() then
    local version = host.request('version', {})
    health.info(('running host: pid %s, version %s'):format(host.pid() or '?', vim.inspect(version)))
  end
end

local function check_env()
  if (vim.env.ANTHROPIC_API_KEY or '') ~= '' then
    health.ok('ANTHROPIC_API_KEY is set')
  else
    health.warn('ANTHROPIC_API_KEY is not set', {
      'export ANTHROPIC_API_KEY before starting Neovim',
      "or set it in Neovim: :let $ANTHROPIC_API_KEY = '<key>' (the next Loopr command passes it to the host)",
    })
  end
  local base = vim.env.ANTHROPIC_BASE_URL
  if base and base ~= '' then
    health.ok('ANTHROPIC_BASE_URL: ' .. base)
  else
    health.info('ANTHROPIC_BASE_URL not set (using https://api.anthropic.com)')
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

function M.check()
  health.start('loopr: Neovim')
  check_neovim()
  health.start('loopr: host binary')
  check_host()
  health.start('loopr: environment')
  check_env()
  health.start('loopr: storage')
  check_storage()
  health.start('loopr: sandbox')
  check_sandbox()
end

return M

-- Installs the host into `<plugin root>/bin/loopr` (what `:LooprInstall[!]` and `build.lua`
-- run): the checksummed release asset for this OS and architecture, else a source build with
-- cargo. Nothing replaces the installed binary until its successor is whole, checked and runs:
-- it is staged in `bin/` and renamed over it, so a failure leaves the old one working.

local notify = require('loopr.notify')

local M = {}

-- How long a download may wait to connect, or receive nothing, before it counts as no network:
-- `$LOOPR_INSTALL_TIMEOUT` seconds (bounded), else this.
local DEFAULT_TIMEOUT_S = 30
local MAX_TIMEOUT_S = 600
-- The most a whole download may take, however slowly its bytes come.
local DOWNLOAD_MAX_TIME_S = 600
-- How long `:LooprInstall` in headless Neovim, or a `build` step, waits for the install (a
-- source build is slow).
M.WAIT_MS = 30 * 60 * 1000
-- Lines of cargo's output shown when a source build fails.
local BUILD_TAIL = 15

-- Release targets by `vim.uv.os_uname()`'s sysname and machine.
local TARGETS = {
  Linux = { x86_64 = 'x86_64-unknown-linux-musl', aarch64 = 'aarch64-unknown-linux-musl' },
  Darwin = { x86_64 = 'x86_64-apple-darwin', arm64 = 'aarch64-apple-darwin' },
}

-- curl's exit codes that mean no network, so a source build is the way left; by what they say.
local CURL_NO_NETWORK = {
  [6] = 'cannot resolve the host of %s',
  [7] = 'cannot connect to %s',
  [28] = 'the download of %s timed out after %d s',
}

---@class loopr.InstallRecord
---@field version string
---@field from 'release'|'source'
---@field target string
---@field reason string Why this path was taken.
---@field url? string The asset's address (release only).

---@class loopr.InstallResult
---@field ok boolean
---@field message string What happened, for the user.

---The release target of `uname`, or nil when Loopr publishes none for it.
---@param uname { sysname: string, machine: string }
---@return string|nil
function M.target(uname)
  local machines = TARGETS[uname.sysname]
  return machines and machines[uname.machine]
end

---Where release assets are downloaded from: the `install_url` option, else
---`$LOOPR_INSTALL_URL`, else the releases of the repository Cargo.toml names.
---@return string
function M.base_url()
  local url = require('loopr.config').get().install_url
  if not url or url == '' then
    url = vim.env.LOOPR_INSTALL_URL
  end
  if not url or url == '' then
    url = require('loopr.generated.version').repository .. '/releases/download'
  end
  return (url:gsub('/+$', ''))
end

---The release asset of `version` for `target`: `<base_url>/v<version>/loopr-<version>-<target>.tar.gz`.
---@param version string
---@param target string
---@return string
function M.asset_url(version, target)
  return ('%s/v%s/loopr-%s-%s.tar.gz'):format(M.base_url(), version, version, target)
end

---How many seconds a download may wait to connect or go without a byte:
---`$LOOPR_INSTALL_TIMEOUT` when it is a whole number from 1 to 600, else 30.
---@return integer
function M.timeout_s()
  local seconds = tonumber(vim.env.LOOPR_INSTALL_TIMEOUT or '')
  if seconds and seconds == math.floor(seconds) and seconds >= 1 and seconds <= MAX_TIMEOUT_S then
    return seconds
  end
  return DEFAULT_TIMEOUT_S
end

---Tell the user how the install goes: plain lines in :messages without a UI (a `build`
---script's log), else Loopr's progress line.
---@param line string
function M.progress(line)
  if #vim.api.nvim_list_uis() == 0 then
    vim.api.nvim_echo({ { notify.prefixed(line) } }, true, {})
  else
    notify.progress(line)
  end
end

---Tell the user how the install ended, as `progress` does, at `level`.
---@param line string
---@param level integer
function M.report(line, level)
  if #vim.api.nvim_list_uis() == 0 then
    vim.api.nvim_echo({ { notify.prefixed(line), level >= vim.log.levels.ERROR and 'ErrorMsg' or nil } }, true, {})
  else
    notify.notify(line, level)
  end
end

---Run `cmd` in the background; `on_exit` runs on the main loop with its result, or with
---code -1 and the reason in stderr when it could not start.
---@param cmd string[]
---@param opts table vim.system's options.
---@param on_exit fun(result: vim.SystemCompleted)
local function run(cmd, opts, on_exit)
  local ok, err = pcall(vim.system, cmd, opts, vim.schedule_wrap(on_exit))
  if not ok then
    -- Without the Lua location vim.system's error starts with ("…/_system.lua:254: ").
    on_exit({ code = -1, signal = 0, stdout = '', stderr = (tostring(err):gsub('^.-:%d+: ', '')) })
  end
end

---The last `count` non-empty lines of `text`.
---@param text string
---@param count integer
---@return string
local function tail(text, count)
  local lines = vim.tbl_filter(function(line)
    return vim.trim(line) ~= ''
  end, vim.split(text or '', '\n'))
  return table.concat(vim.list_slice(lines, math.max(1, #lines - count + 1)), '\n')
end

---@param path string
---@param text string
---@return boolean ok
---@return string|nil err
local function write_file(path, text)
  local file, err = io.open(path, 'wb')
  if not file then
    return false, err
  end
  local ok, write_err = file:write(text)
  file:close()
  if not ok then
    return false, write_err
  end
  return true
end

---@class loopr.InstallPlace
---@field root string The plugin root.
---@field bin_dir string `<root>/bin`.
---@field staging string A fresh directory inside `bin/`, removed when the install ends.
---@field progress fun(line: string) Tells the user what the install does now.

---Put `binary` (a file in the staging directory) in place as `bin/loopr` once it runs, then
---`bin/install.json` beside it; each by a rename, so either is whole or still the old one.
---@param place loopr.InstallPlace
---@param binary string
---@param record loopr.InstallRecord
---@param done fun(result: loopr.InstallResult)
local function put_in_place(place, binary, record, done)
  vim.uv.fs_chmod(binary, tonumber('755', 8))
  run({ binary, '--version' }, {}, function(result)
    if result.code ~= 0 then
      return done({
        ok = false,
        message = ('the new host does not run (%s); the installed one is kept'):format(
          vim.trim(result.stderr ~= '' and result.stderr or ('exit code ' .. result.code))
        ),
      })
    end
    local target = vim.fs.joinpath(place.bin_dir, 'loopr')
    local renamed, rename_err = vim.uv.fs_rename(binary, target)
    if not renamed then
      return done({ ok = false, message = ('cannot move the new host to %s: %s'):format(target, rename_err) })
    end
    local record_path = vim.fs.joinpath(place.bin_dir, 'install.json')
    local staged_record = vim.fs.joinpath(place.staging, 'install.json')
    local written, write_err = write_file(staged_record, vim.json.encode(record) .. '\n')
    if written then
      written, write_err = vim.uv.fs_rename(staged_record, record_path)
    end
    if not written then
      return done({
        ok = false,
        message = ('installed %s but cannot write %s: %s'):format(target, record_path, write_err),
      })
    end
    local via = record.from == 'release' and ('release ' .. record.target) or 'a source build'
    done({
      ok = true,
      message = ('installed loopr %s from %s (%s) at %s'):format(record.version, via, record.reason, target),
    })
  end)
end

---Build the host with `cargo build --release` in the plugin root and install what it built.
---@param place loopr.InstallPlace
---@param version string
---@param target string
---@param reason string Why the source is built.
---@param done fun(result: loopr.InstallResult)
local function install_from_source(place, version, target, reason, done)
  if vim.fn.executable('cargo') ~= 1 then
    return done({
      ok = false,
      message = ('cannot build from source (%s): cargo is not on PATH; install Rust from https://rustup.rs and run :LooprInstall! again'):format(
        reason
      ),
    })
  end
  place.progress(('building from source with cargo build --release in %s (%s)'):format(place.root, reason))
  run({ 'cargo', 'build', '--release' }, { cwd = place.root, text = true }, function(result)
    if result.code ~= 0 then
      return done({
        ok = false,
        message = ('cargo build --release failed (exit code %d); the installed host is kept:\n%s'):format(
          result.code,
          tail((result.stdout or '') .. '\n' .. (result.stderr or ''), BUILD_TAIL)
        ),
      })
    end
    local built = vim.fs.joinpath(place.root, 'target', 'release', 'loopr')
    local staged = vim.fs.joinpath(place.staging, 'loopr')
    local copied, copy_err = vim.uv.fs_copyfile(built, staged)
    if not copied then
      return done({ ok = false, message = ('cargo built nothing at %s: %s'):format(built, copy_err) })
    end
    put_in_place(place, staged, { version = version, from = 'source', target = target, reason = reason }, done)
  end)
end

---Download `url` into `path` with curl, failing on an HTTP error, bounded in time: it gives up
---when it cannot connect, or receives nothing, for `timeout_s` seconds.
---@param url string
---@param path string
---@param timeout_s integer
---@param on_exit fun(result: vim.SystemCompleted)
local function download(url, path, timeout_s, on_exit)
  run({
    'curl',
    '--fail',
    '--silent',
    '--show-error',
    '--location',
    '--connect-timeout',
    tostring(timeout_s),
    '--speed-limit',
    '1',
    '--speed-time',
    tostring(timeout_s),
    '--max-time',
    tostring(DOWNLOAD_MAX_TIME_S),
    '--output',
    path,
    url,
  }, { text = true }, on_exit)
end

---Why a failed download means there is no release to take (a source build is next), or nil
---when it is a failure to report.
---@param result vim.SystemCompleted
---@param url string
---@param timeout_s integer
---@return string|nil
local function no_release_reason(result, url, timeout_s)
  local no_network = CURL_NO_NETWORK[result.code]
  if no_network then
    return ('no network: %s (%s)'):format(no_network:format(url, timeout_s), vim.trim(result.stderr or ''))
  end
  if result.code == 22 and (result.stderr or ''):find('404') then
    return ('no release asset at %s (404)'):format(url)
  end
  return nil
end

---The checksum `sums` (SHA256SUMS' text) gives `file_name`, or nil.
---@param sums string
---@param file_name string
---@return string|nil
local function expected_sum(sums, file_name)
  for line in vim.gsplit(sums, '\n') do
    local sum, name = line:match('^(%x+)%s+%*?(%S+)%s*$')
    if name == file_name then
      return sum:lower()
    end
  end
  return nil
end

---@param path string
---@param on_sum fun(sum: string|nil, err: string|nil)
local function sha256_of(path, on_sum)
  local cmd = vim.fn.executable('sha256sum') == 1 and { 'sha256sum', path } or { 'shasum', '-a', '256', path }
  run(cmd, { text = true }, function(result)
    local sum = result.code == 0 and result.stdout:match('^(%x+)') or nil
    on_sum(sum and sum:lower(), sum == nil and vim.trim(result.stderr or '') or nil)
  end)
end

---Download this version's asset for `target` and its SHA256SUMS, check it, unpack it and
---install it; with no release to take, build from source instead.
---@param place loopr.InstallPlace
---@param version string
---@param target string
---@param done fun(result: loopr.InstallResult)
local function install_release(place, version, target, done)
  local asset_url = M.asset_url(version, target)
  local dir_url, asset = asset_url:match('^(.*)/([^/]+)$')
  local sums_url = dir_url .. '/SHA256SUMS'
  local sums_path = vim.fs.joinpath(place.staging, 'SHA256SUMS')
  local asset_path = vim.fs.joinpath(place.staging, asset)
  local timeout_s = M.timeout_s()
  local function failed(what, result)
    local reason = no_release_reason(result, what, timeout_s)
    if reason then
      return install_from_source(place, version, target, reason, done)
    end
    done({
      ok = false,
      message = ('download of %s failed (%s); the installed host is kept'):format(
        what,
        vim.trim(result.stderr ~= '' and result.stderr or ('curl exit code ' .. result.code))
      ),
    })
  end
  place.progress(('downloading %s'):format(asset_url))
  download(sums_url, sums_path, timeout_s, function(sums_result)
    if sums_result.code ~= 0 then
      return failed(sums_url, sums_result)
    end
    download(asset_url, asset_path, timeout_s, function(asset_result)
      if asset_result.code ~= 0 then
        return failed(asset_url, asset_result)
      end
      local sums_file = io.open(sums_path, 'rb')
      local expected = sums_file and expected_sum(sums_file:read('*a') or '', asset) or nil
      if sums_file then
        sums_file:close()
      end
      if not expected then
        return done({ ok = false, message = ('%s lists no checksum for %s; nothing installed'):format(sums_url, asset) })
      end
      sha256_of(asset_path, function(actual, sum_err)
        if actual ~= expected then
          return done({
            ok = false,
            message = actual
                and ('checksum mismatch for %s: SHA256SUMS says %s, the download is %s; nothing installed'):format(
                  asset,
                  expected,
                  actual
                )
              or ('cannot checksum %s: %s; nothing installed'):format(asset, sum_err),
          })
        end
        place.progress(('%s matches its SHA256SUMS checksum; unpacking it'):format(asset))
        local unpacked = vim.fs.joinpath(place.staging, 'unpacked')
        vim.fn.mkdir(unpacked, 'p')
        run({ 'tar', '-xzf', asset_path, '-C', unpacked }, { text = true }, function(tar_result)
          local binary = vim.fs.joinpath(unpacked, 'loopr')
          if tar_result.code ~= 0 or vim.fn.filereadable(binary) ~= 1 then
            return done({
              ok = false,
              message = ('%s is not a tarball holding loopr (%s); nothing installed'):format(
                asset,
                vim.trim(tar_result.stderr ~= '' and tar_result.stderr or 'no loopr at its top level')
              ),
            })
          end
          put_in_place(place, binary, {
            version = version,
            from = 'release',
            target = target,
            reason = ('a release exists for %s'):format(target),
            url = asset_url,
          }, done)
        end)
      end)
    end)
  end)
end

---@class loopr.InstallOptions
---@field from_source? boolean Build from source rather than download a release.
---@field on_done? fun(result: loopr.InstallResult) Gets what happened once the install ends.
---@field on_progress? fun(line: string) Takes the progress lines, and with them the telling of
---the result: a caller that gives it tells the user itself (a `build` step yields them). Without
---it, `M.progress` and `M.report` tell the user.

---Install the host in the background.
---@param opts loopr.InstallOptions
function M.install(opts)
  local on_done = opts.on_done
  local root = require('loopr.host').plugin_root()
  local bin_dir = vim.fs.joinpath(root, 'bin')
  vim.fn.mkdir(bin_dir, 'p')
  local staging = vim.uv.fs_mkdtemp(vim.fs.joinpath(bin_dir, '.staging-XXXXXX'))
  local function done(result)
    if staging then
      vim.fn.delete(staging, 'rf')
    end
    if not opts.on_progress then
      M.report(result.message, result.ok and vim.log.levels.INFO or vim.log.levels.ERROR)
    end
    if on_done then
      on_done(result)
    end
  end
  if not staging then
    return done({ ok = false, message = ('cannot create a directory in %s to install into'):format(bin_dir) })
  end
  local place = { root = root, bin_dir = bin_dir, staging = staging, progress = opts.on_progress or M.progress }
  local version = require('loopr.generated.version').version
  local uname = vim.uv.os_uname()
  local target = M.target(uname)
  if opts.from_source then
    return install_from_source(place, version, target or uname.machine, 'a source build was asked for (!)', done)
  end
  if not target then
    local reason = ('no release is built for %s %s'):format(uname.sysname, uname.machine)
    return install_from_source(place, version, uname.machine, reason, done)
  end
  install_release(place, version, target, done)
end

---Install and wait until it is done (bounded): what a headless
---`nvim --headless -c LooprInstall -c q` needs.
---@param from_source boolean
---@return loopr.InstallResult
function M.install_and_wait(from_source)
  local outcome
  M.install({
    from_source = from_source,
    on_done = function(result)
      outcome = result
    end,
  })
  if not vim.wait(M.WAIT_MS, function()
    return outcome ~= nil
  end, 50) then
    outcome = { ok = false, message = 'the install did not finish in time; run :LooprInstall again' }
    M.report(outcome.message, vim.log.levels.ERROR)
  end
  return outcome
end

---`:LooprInstall[!]`: in the background with a UI, else waiting for the result.
---@param from_source boolean
function M.command(from_source)
  if #vim.api.nvim_list_uis() == 0 then
    M.install_and_wait(from_source)
  else
    M.install({ from_source = from_source })
  end
end

return M

-- The install as a plugin manager's build step runs it (`build.lua` at the plugin root). lazy.nvim
-- runs `build.lua` inside a coroutine it resumes on each turn of the event loop, showing what the
-- coroutine yields as the plugin's build status: there the step yields each progress line and
-- returns only once the install has ended, so lazy's "built" means the host is in place.
-- Elsewhere (`nvim -l build.lua`, other managers) it waits for the install, bounded.

local install = require('loopr.install')
local notify = require('loopr.notify')

local M = {}

---What lazy.nvim resumes a build's coroutine with to stop it.
local ABORT = 'abort'

---Whether this code runs in a coroutine that can yield to whoever resumes it.
---@return boolean
local function can_yield()
  if coroutine.isyieldable then
    return coroutine.isyieldable()
  end
  local _, is_main = coroutine.running()
  return coroutine.running() ~= nil and not is_main
end

---@param message string
local function fail(message)
  error(notify.prefixed(message), 0)
end

---Install the host from a release (else from source, as `:LooprInstall`) and return once it is
---installed; raises an error with the reason and the fix when the install failed.
function M.run()
  local yielding = can_yield()
  local lines = {}
  local outcome
  install.install({
    on_progress = function(line)
      if yielding then
        table.insert(lines, line)
      else
        install.progress(line)
      end
    end,
    on_done = function(result)
      outcome = result
    end,
  })
  local deadline = vim.uv.hrtime() + install.WAIT_MS * 1e6
  if yielding then
    -- Each yield hands the editor back until the next resume; a progress line goes with it.
    while (outcome == nil or #lines > 0) and vim.uv.hrtime() < deadline do
      if coroutine.yield(table.remove(lines, 1)) == ABORT then
        fail('the install was stopped before it ended; run :LooprInstall to install the host')
      end
    end
  else
    vim.wait(install.WAIT_MS, function()
      return outcome ~= nil
    end, 50)
  end
  if outcome == nil then
    fail('the install did not finish in time; run :LooprInstall again')
  end
  if not outcome.ok then
    fail(outcome.message)
  end
  if yielding then
    coroutine.yield(outcome.message)
  else
    install.report(outcome.message, vim.log.levels.INFO)
  end
end

return M

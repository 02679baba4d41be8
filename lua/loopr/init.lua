-- Public Lua API of Loopr; each user command calls one function here.

local config = require('loopr.config')

local M = {}

---@param msg string
---@param level? integer
local function notify(msg, level)
  vim.notify(msg, level or vim.log.levels.ERROR)
end

---Configure Loopr. Raises a Lua error naming the offending option.
---@param opts loopr.Opts|nil
function M.setup(opts)
  if vim.fn.has('nvim-0.10') ~= 1 then
    error('loopr: Neovim >= 0.10 is required', 2)
  end
  local ok, err = config.setup(opts)
  if not ok then
    error(err, 2)
  end
end

---Start a plan loop for `task` in the current project.
---@param task string
---@return string|nil loop_id nil on error (already notified).
function M.plan(task)
  task = vim.trim(task or '')
  if task == '' then
    notify('LooprPlan needs a task, e.g. :LooprPlan Add a --version flag')
    return nil
  end
  if (vim.env.ANTHROPIC_API_KEY or '') == '' then
    notify('ANTHROPIC_API_KEY is not set; export it before starting Neovim')
    return nil
  end
  local result, err = require('loopr.host').request('plan', {
    task = task,
    root = config.root(),
    settings = config.settings(),
  })
  if err then
    notify(err)
    return nil
  end
  local id = type(result) == 'table' and result.loop_id or nil
  if type(id) ~= 'string' then
    notify('Loopr: unexpected reply to plan: ' .. vim.inspect(result))
    return nil
  end
  notify(('Loopr: planning (loop %s)'):format(id), vim.log.levels.INFO)
  return id
end

---Open or refresh the status buffer.
---@return integer|nil buf
function M.status()
  return require('loopr.status').open()
end

---Cancel loop `id`, or the newest running loop when `id` is nil or empty.
---@param id string|nil
---@return string|nil loop_id The cancelled loop, nil on error (already notified).
function M.cancel(id)
  if id then
    id = vim.trim(id)
  end
  local result, err = require('loopr.host').request('cancel', {
    root = config.root(),
    id = (id ~= '' and id) or nil,
  })
  if err then
    notify(err)
    return nil
  end
  local cancelled = type(result) == 'table' and result.loop_id or id
  notify(('Loopr: cancelling loop %s'):format(cancelled), vim.log.levels.INFO)
  return cancelled
end

---Open the host's log file in a split.
---@return integer|nil buf
function M.open_log()
  local file = require('loopr.host').log_file()
  if not vim.uv.fs_stat(file) then
    notify(('Loopr: no log file yet at %s'):format(file), vim.log.levels.WARN)
    return nil
  end
  vim.cmd(('split %s'):format(vim.fn.fnameescape(file)))
  vim.bo.autoread = true
  vim.cmd('normal! G')
  return vim.api.nvim_get_current_buf()
end

---Statusline component: latest progress message, "" when nothing runs.
---@return string
function M.progress()
  return require('loopr.progress').get()
end

---Complete ids of running loops (for `:LooprCancel`).
---@param arglead string
---@return string[]
function M.complete_loop_ids(arglead)
  local ids = require('loopr.host').request('loop_ids', { root = config.root(), running_only = true })
  if type(ids) ~= 'table' then
    return {}
  end
  return vim.tbl_filter(function(id)
    return type(id) == 'string' and vim.startswith(id, arglead or '')
  end, ids)
end

return M

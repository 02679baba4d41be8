-- Loopr user commands. Modules load lazily on first use.

if vim.g.loaded_loopr then
  return
end
vim.g.loaded_loopr = 1

if vim.fn.has('nvim-0.10') ~= 1 then
  vim.notify('loopr: Neovim >= 0.10 is required; commands are not defined', vim.log.levels.ERROR)
  return
end

local command = vim.api.nvim_create_user_command

command('LooprPlan', function(args)
  require('loopr').plan(args.args)
end, { nargs = '+', desc = 'Loopr: plan a task in this project (writes plan.md)' })

command('LooprStatus', function()
  require('loopr').status()
end, { nargs = 0, desc = "Loopr: list this project's loops" })

command('LooprLog', function()
  require('loopr').open_log()
end, { nargs = 0, desc = "Loopr: open the host's log file" })

command('LooprCancel', function(args)
  require('loopr').cancel(args.args)
end, {
  nargs = '?',
  desc = 'Loopr: cancel a running loop (default: the newest)',
  complete = function(arglead)
    return require('loopr').complete_loop_ids(arglead)
  end,
})

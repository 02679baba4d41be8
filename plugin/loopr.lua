-- Loopr user commands and resuming loops at startup. Modules load lazily on first use.

if vim.g.loaded_loopr then
  return
end
vim.g.loaded_loopr = 1

if vim.fn.has('nvim-0.10') ~= 1 then
  vim.notify('Loopr: Neovim >= 0.10 is required; commands are not defined', vim.log.levels.ERROR)
  return
end

local command = vim.api.nvim_create_user_command

command('LooprPlan', function(args)
  require('loopr').plan(args.args)
end, { nargs = '+', desc = 'Loopr: plan a task in this project (writes plan.md)' })

command('LooprStatus', function()
  require('loopr').status()
end, { nargs = 0, desc = "Loopr: list this project's loops" })

command('LooprMcp', function()
  require('loopr').mcp()
end, { nargs = 0, desc = "Loopr: the host's MCP servers, their tools and recent errors" })

command('LooprTranscript', function(args)
  require('loopr').transcript(args.args)
end, {
  nargs = '?',
  desc = "Loopr: follow a loop's transcript (default: this artifact's loop, else the newest running)",
  complete = function(arglead)
    return require('loopr').complete_all_loop_ids(arglead)
  end,
})

command('LooprLog', function()
  require('loopr').open_log()
end, { nargs = 0, desc = "Loopr: open the host's log file" })

command('LooprCancel', function(args)
  require('loopr').cancel(args.args)
end, {
  nargs = '?',
  desc = 'Loopr: cancel a loop and its descendants (default: the newest running)',
  complete = function(arglead)
    return require('loopr').complete_loop_ids(arglead)
  end,
})

command('LooprApprove', function(args)
  require('loopr').approve(args.args)
end, {
  nargs = '?',
  desc = 'Loopr: approve a loop awaiting review (default: this artifact, else the newest)',
  complete = function(arglead)
    return require('loopr').complete_awaiting_ids(arglead)
  end,
})

command('LooprRevise', function(args)
  require('loopr').revise(args.args)
end, { nargs = '+', desc = "Loopr: re-run this artifact's loop with feedback" })

command('LooprTasks', function(args)
  require('loopr').tasks(args.args)
end, {
  nargs = '?',
  desc = 'Loopr: quickfix list of phase tasks (default: this phase, else all)',
  complete = function(arglead)
    return require('loopr').complete_phase_names(arglead)
  end,
})

command('LooprRun', function(args)
  require('loopr').run(args.args)
end, {
  nargs = '?',
  desc = 'Loopr: implement a phase with a code loop (default: this phase)',
  complete = function(arglead)
    return require('loopr').complete_phase_names(arglead)
  end,
})

command('LooprChanges', function(args)
  require('loopr').changes(args.args)
end, {
  nargs = '?',
  desc = "Loopr: quickfix list of a code loop's changes, one entry per hunk",
  complete = function(arglead)
    return require('loopr').complete_phase_names(arglead)
  end,
})

command('LooprUndo', function(args)
  require('loopr').undo(args.args, args.bang)
end, {
  nargs = '?',
  bang = true,
  desc = 'Loopr: undo what a code loop changed (! also files changed since)',
  complete = function(arglead)
    return require('loopr').complete_phase_names(arglead)
  end,
})

command('LooprRetry', function(args)
  require('loopr').retry(args.args)
end, {
  nargs = '?',
  desc = 'Loopr: run a failed, cancelled or interrupted loop again (default: this artifact, else the newest)',
  complete = function(arglead)
    return require('loopr').complete_retryable_ids(arglead)
  end,
})

vim.api.nvim_create_autocmd('VimEnter', {
  group = vim.api.nvim_create_augroup('loopr_resume', { clear = true }),
  desc = 'Loopr: resume loops a previous host left unfinished',
  once = true,
  callback = function()
    vim.schedule(function()
      -- A setup() that comes after startup may still set `bin` or turn `resume` off.
      require('loopr.config').when_configured(function()
        if require('loopr.config').get().resume then
          require('loopr').resume_if_needed()
        end
      end, 2000)
    end)
  end,
})

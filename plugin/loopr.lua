-- Loopr user commands (from lua/loopr/commands.lua) and resuming loops at startup. Modules
-- load lazily on first use.

if vim.g.loaded_loopr then
  return
end
vim.g.loaded_loopr = 1

if vim.fn.has('nvim-0.10') ~= 1 then
  vim.notify('Loopr: Neovim >= 0.10 is required; commands are not defined', vim.log.levels.ERROR)
  return
end

-- The commands come from one table (lua/loopr/commands.lua), which the docs are checked against.
for _, spec in ipairs(require('loopr.commands')) do
  local complete = spec.complete
  vim.api.nvim_create_user_command(spec.name, spec.run, {
    nargs = spec.nargs,
    bang = spec.bang,
    desc = spec.desc,
    complete = complete and function(arglead)
      return require('loopr')[complete](arglead)
    end,
  })
end

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

-- An artifact (plan.md, spec.md, phase.md or its .json) read from $LOOPR_HOME, by Loopr or by
-- you, is a review buffer: read-only, its state and keys in the winbar.
vim.api.nvim_create_autocmd('BufReadPost', {
  group = vim.api.nvim_create_augroup('loopr_artifacts', { clear = true }),
  pattern = '*/artifacts/{plan,spec,phase}.{md,json}',
  desc = 'Loopr: an artifact is a review buffer',
  callback = function(args)
    require('loopr.review').attach(args.buf)
  end,
})

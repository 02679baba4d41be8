-- Installs Loopr's host for this plugin's version into `bin/loopr`, as `:LooprInstall` does.
-- lazy.nvim runs this file after it installs or updates the plugin (the spec needs no `build`),
-- inside a coroutine: it shows each progress line and reports "built" only once the host is in
-- place, or the error that says why not. Without lazy: `nvim -l build.lua` in this directory.

local root = vim.fs.dirname(debug.getinfo(1, 'S').source:gsub('^@', ''))
root = vim.uv.fs_realpath(root) or root

local found, build_step = pcall(require, 'loopr.build_step')
if not found then
  -- Not on 'runtimepath' (`nvim -l build.lua`, or a manager that builds before it loads).
  vim.opt.runtimepath:prepend(root)
  build_step = require('loopr.build_step')
end
local loaded_from = require('loopr.host').plugin_root()
if loaded_from ~= root then
  error(
    ('Loopr: build.lua in %s found Loopr loaded from %s; run it where that copy is not on the runtimepath'):format(
      root,
      loaded_from
    ),
    0
  )
end
build_step.run()

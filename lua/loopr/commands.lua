-- Every `:Loopr*` command, defined once: plugin/loopr.lua creates the user commands from this
-- table, and a test checks it against |loopr-commands| in doc/loopr.txt. Adding a command is
-- one entry here (and its function in init.lua). Loaded at startup: nothing here requires
-- another module until a command runs or completes.

---@class loopr.Command
---@field name string The command's name, `Loopr…`.
---@field nargs 0|'?'|'+' Its arguments, as |:command-nargs| has them.
---@field bang? boolean Whether it takes a `!`.
---@field desc string What it does, as `:command` lists it.
---@field complete? loopr.Completion What <Tab> offers for its argument.
---@field run fun(args: table) Runs it with |nvim_create_user_command()|'s arguments.

---@param name string A function of require('loopr').
---@return fun(args: table)
local function with_argument(name)
  return function(args)
    require('loopr')[name](args.args)
  end
end

---@param name string A function of require('loopr').
---@return fun(args: table)
local function without_argument(name)
  return function()
    require('loopr')[name]()
  end
end

---@alias loopr.Completion
---| "loops" # the ids of every loop of the project
---| "phases" # the names of the current phases
---| "specs" # the names of the current specs
---| "run" # the names of the phases that may run, and of plans and specs
---| "verify" # the names of the phases and specs a verification takes
---| loopr.Purpose # the ids of the loops the host says that action takes

---@type loopr.Command[]
return {
  {
    name = 'LooprPlan',
    -- Without a task it says the usage rather than Neovim's bare E471.
    nargs = '?',
    desc = 'Loopr: plan a task in this project (writes plan.md)',
    run = with_argument('plan'),
  },
  {
    name = 'LooprStatus',
    nargs = 0,
    desc = "Loopr: list this project's loops",
    run = without_argument('status'),
  },
  {
    name = 'LooprMcp',
    nargs = 0,
    desc = "Loopr: the host's MCP servers, their tools and recent errors",
    run = without_argument('mcp'),
  },
  {
    name = 'LooprTranscript',
    nargs = '?',
    desc = "Loopr: follow a loop's transcript (default: this artifact's loop, else the newest running)",
    complete = 'loops',
    run = with_argument('transcript'),
  },
  {
    name = 'LooprLog',
    nargs = 0,
    desc = "Loopr: open the host's log file",
    run = without_argument('open_log'),
  },
  {
    name = 'LooprCancel',
    nargs = '?',
    desc = "Loopr: cancel a loop and its descendants (default: this artifact's, else the running plan, else ask)",
    complete = 'cancel',
    run = with_argument('cancel'),
  },
  {
    name = 'LooprApprove',
    nargs = '?',
    desc = 'Loopr: approve a loop awaiting review (default: this artifact, else the newest)',
    complete = 'approve',
    run = with_argument('approve'),
  },
  {
    name = 'LooprRevise',
    nargs = '?',
    desc = "Loopr: re-run this artifact's loop with feedback",
    run = with_argument('revise'),
  },
  {
    name = 'LooprTasks',
    nargs = '?',
    desc = "Loopr: quickfix list of phase tasks (default: this phase, else the current plan's)",
    complete = 'phases',
    run = with_argument('tasks'),
  },
  {
    name = 'LooprRequirements',
    nargs = '?',
    desc = "Loopr: quickfix list of a spec's requirements not yet verified (default: this spec, else the newest)",
    complete = 'specs',
    run = with_argument('requirements'),
  },
  {
    name = 'LooprRun',
    nargs = '?',
    desc = "Loopr: implement a phase with a code loop, or every phase of a plan or spec in order (default: this buffer's)",
    complete = 'run',
    run = with_argument('run'),
  },
  {
    name = 'LooprVerify',
    nargs = '?',
    desc = 'Loopr: verify the working tree against a phase or spec, changing nothing (default: this phase.md or spec.md)',
    complete = 'verify',
    run = with_argument('verify'),
  },
  {
    name = 'LooprChanges',
    nargs = '?',
    desc = "Loopr: quickfix list of a code loop's changes, one entry per hunk",
    complete = 'phases',
    run = with_argument('changes'),
  },
  {
    name = 'LooprUndo',
    nargs = '?',
    bang = true,
    desc = 'Loopr: undo what a code loop changed (! also files changed since)',
    complete = 'phases',
    run = function(args)
      require('loopr').undo(args.args, args.bang)
    end,
  },
  {
    name = 'LooprRewind',
    nargs = '?',
    bang = true,
    desc = 'Loopr: put the working tree back as before a phase, later phases too (! also files changed since)',
    complete = 'phases',
    run = function(args)
      require('loopr').rewind(args.args, args.bang)
    end,
  },
  {
    name = 'LooprInstall',
    nargs = 0,
    bang = true,
    desc = 'Loopr: install the host from a checksummed release for this plugin version (! builds it from source with cargo)',
    run = function(args)
      require('loopr.install').command(args.bang)
    end,
  },
  {
    name = 'LooprRetry',
    nargs = '?',
    desc = 'Loopr: run a failed, cancelled or interrupted loop again (default: this artifact, else the newest)',
    complete = 'retry',
    run = with_argument('retry'),
  },
}

-- What a code loop changed: a quickfix list with one entry per changed hunk, and undoing it
-- all back to the baseline recorded when the loop started.

local M = {}

---Quickfix items for a `changes` reply.
---@param reply {loop_id: string, items: loopr.ChangeItem[]}|any
---@return vim.quickfix.entry[]
function M.items(reply)
  local items = {}
  for _, item in ipairs(type(reply) == 'table' and type(reply.items) == 'table' and reply.items or {}) do
    local location = item.location or {}
    local start = (location.range or {}).start or {}
    if type(location.uri) == 'string' then
      table.insert(items, {
        filename = vim.uri_to_fname(location.uri),
        lnum = (tonumber(start.line) or 0) + 1,
        col = 1,
        text = item.text,
        user_data = { loop_id = reply.loop_id, status = item.status },
        valid = 1,
      })
    end
  end
  return items
end

---The title of the changes list of `phase` (as the user named it).
---@param phase string
---@return string
local function title(phase)
  return ('Loopr: %s changes'):format(phase)
end

---The quickfix items for the changes of `phase`'s newest code loop (a phase name, a phase
---loop id or a code loop id), and that code loop's id.
---@param phase string
---@param root string
---@return vim.quickfix.entry[]|nil items nil on error (notified).
---@return string|nil loop_id
local function fetch(phase, root)
  local reply, err = require('loopr.host').request('changes', { root = root, phase = phase })
  if err then
    require('loopr.notify').notify(err, vim.log.levels.ERROR)
    return nil
  end
  return M.items(reply), type(reply) == 'table' and reply.loop_id or nil
end

---Fill the changes list of `phase`, in place where it exists. The list knows its phase and
---code loop (its `context`), so commands run from it need no argument and an undo can
---refresh it.
---@param phase string
---@param loop_id string|nil
---@param items vim.quickfix.entry[]
---@return integer qf_id
local function fill(phase, loop_id, items)
  return require('loopr.qf').set({
    title = title(phase),
    items = items,
    context = { loopr = { kind = 'changes', phase = phase, loop_id = loop_id } },
  })
end

---Show the changes of `phase`'s newest code loop in the quickfix list.
---@param phase string Phase name or phase loop id.
---@param root string Project root.
---@return integer|nil qf_id
function M.open(phase, root)
  local items, loop_id = fetch(phase, root)
  if not items then
    return nil
  end
  if #items == 0 then
    -- A list already open for the phase no longer shows what is gone.
    if require('loopr.qf').find(title(phase)) then
      fill(phase, loop_id, items)
    end
    require('loopr.notify').notify(('Loopr: %s changed nothing'):format(phase), vim.log.levels.INFO)
    return nil
  end
  local id = fill(phase, loop_id, items)
  vim.cmd('botright copen')
  return id
end

---Re-list, in place, every changes list of code loop `loop_id`: what an undo restored leaves
---it, what it left stays.
---@param loop_id string
---@param root string
function M.refresh(loop_id, root)
  for nr = 1, vim.fn.getqflist({ nr = '$' }).nr do
    local context = vim.fn.getqflist({ nr = nr, context = 0 }).context
    local list = type(context) == 'table' and context.loopr or nil
    if type(list) == 'table' and list.kind == 'changes' and list.loop_id == loop_id then
      local items = fetch(loop_id, root)
      if items then
        fill(list.phase, loop_id, items)
      end
    end
  end
end

---The callback for the host's reply to an undo or a rewind of `phase`: tells the outcome with
---`show`, re-lists the changes lists of the code loop it names, passes what was shown on.
---@param show fun(phase: string, reply: any, err: string|nil): table|nil
---@param phase string
---@param root string
---@param on_done? fun(reply: table|nil)
---@return fun(reply: any, err: string|nil)
local function on_restored(show, phase, root, on_done)
  return function(reply, err)
    local shown = show(phase, reply, err)
    if shown and type(shown.loop_id) == 'string' then
      M.refresh(shown.loop_id, root)
    end
    if on_done then
      on_done(shown)
    end
  end
end

---Undo what `phase`'s newest code loop changed: only the files its tools and commands
---changed go back to what they held before. A file changed since the loop changed it, or
---first changed while a command of the loop ran or by a coding agent's own tools (it may hold
---the user's saves), is left alone (and named) unless `force`; a buffer with unsaved changes always is. Open buffers
---take the restored text (and `u` undoes it).
---@param phase string Phase name or phase loop id.
---@param root string Project root.
---@param force? boolean Also restore files changed since the loop changed them, while its commands ran or by its agent (`:LooprUndo!`).
---@param on_done? fun(reply: loopr.UndoReply|nil) Called with the host's reply, nil on error (notified).
function M.undo(phase, root, force, on_done)
  local params = { root = root, phase = phase, force = force == true }
  require('loopr.host').send('undo', params, on_restored(M.show_undo, phase, root, on_done))
end

---The lines naming the files left as they are and, when ! would overwrite some, how.
---@param skipped {path: string, reason: string, message: string}[]
---@param command string The command that overwrites them with !, and its argument.
---@return string[]
local function left_lines(skipped, command)
  local lines = {}
  local reasons = {}
  for _, file in ipairs(skipped) do
    table.insert(lines, ('  %s: %s'):format(vim.fn.fnamemodify(file.path, ':.'), file.message))
    reasons[file.reason] = true
  end
  -- Only these are overwritten with !; unsaved buffers and unrestorable files never are.
  local forcible = {}
  if reasons.changed_since then
    table.insert(forcible, 'changed since')
  end
  if reasons.changed_during_command then
    table.insert(forcible, 'changed during a command')
  end
  if reasons.written_by_agent then
    table.insert(forcible, 'written by the coding agent')
  end
  if #forcible > 0 then
    table.insert(lines, ('Review them; %s overwrites the files %s.'):format(command, table.concat(forcible, ' or ')))
  end
  return lines
end

---Tell what an undo did (or why not).
---@param phase string
---@param reply any The host's reply.
---@param err string|nil The host's error.
---@return loopr.UndoReply|nil
function M.show_undo(phase, reply, err)
  if err then
    require('loopr.notify').notify(err, vim.log.levels.ERROR)
    return nil
  end
  reply = type(reply) == 'table' and reply or {}
  local restored = type(reply.restored) == 'table' and reply.restored or {}
  local skipped = type(reply.skipped) == 'table' and reply.skipped or {}
  local done = reply.rewind_undone
      and ('Loopr: undid the rewind to before %s: restored %d file(s)'):format(phase, #restored)
    or ('Loopr: restored %d file(s) changed by %s'):format(#restored, phase)
  if #skipped == 0 then
    require('loopr.notify').notify(done, vim.log.levels.INFO)
    return reply
  end
  local lines = { done .. '; left as they are:' }
  vim.list_extend(lines, left_lines(skipped, (':LooprUndo! %s'):format(phase)))
  require('loopr.notify').notify(table.concat(lines, '\n'), vim.log.levels.WARN)
  return reply
end

---Put the working tree back as it was before `phase`: what its code loop and every later one
---changed goes back (a file changed since stays unless `force`); those loops show `rewound`.
---@param phase string Phase name or phase loop id.
---@param root string Project root.
---@param force? boolean Also restore files changed since a loop changed them (`:LooprRewind!`).
---@param on_done? fun(reply: loopr.RewindReply|nil) Called with the host's reply, nil on error (notified).
function M.rewind(phase, root, force, on_done)
  local params = { root = root, phase = phase, force = force == true }
  require('loopr.host').send('rewind', params, on_restored(M.show_rewind, phase, root, on_done))
end

---Tell what a rewind did (or why not), and how to undo it.
---@param phase string
---@param reply any The host's reply.
---@param err string|nil The host's error.
---@return loopr.RewindReply|nil
function M.show_rewind(phase, reply, err)
  if err then
    require('loopr.notify').notify(err, vim.log.levels.ERROR)
    return nil
  end
  reply = type(reply) == 'table' and reply or {}
  local restored = type(reply.restored) == 'table' and reply.restored or {}
  local skipped = type(reply.skipped) == 'table' and reply.skipped or {}
  local lines = {
    ('Loopr: rewound to before %s: restored %d file(s), %d code loop(s) rewound'):format(
      phase,
      #restored,
      tonumber(reply.rewound) or 0
    ),
  }
  if #skipped > 0 then
    lines[1] = lines[1] .. '; left as they are:'
    vim.list_extend(lines, left_lines(skipped, (':LooprRewind! %s'):format(phase)))
  end
  if reply.undoable then
    table.insert(lines, (':LooprUndo %s undoes the rewind.'):format(phase))
  else
    table.insert(lines, 'Made from the baselines (no git checkpoint): it cannot be undone.')
  end
  local level = #skipped > 0 and vim.log.levels.WARN or vim.log.levels.INFO
  require('loopr.notify').notify(table.concat(lines, '\n'), level)
  return reply
end

return M

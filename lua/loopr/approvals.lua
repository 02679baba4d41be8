-- Reviewing the changes code loops ask to make: one `loopr://approval/<id>` buffer at a
-- time, the other requests queued behind it.

local M = {}

local MAX_HEIGHT = 15
local CLOSED = 'closed without a decision'
local SUBJECT_WIDTH = 60

---@alias loopr.ApprovalKind "write"|"edit"|"command"|"fetch"|"mcp"
---@alias loopr.Decision "accept"|"accept_all"|"reject"

---@class loopr.ApprovalRequest
---@field id integer
---@field loop_id string
---@field kind loopr.ApprovalKind
---@field tool string "write_file", "edit_file", "run_command", "web_fetch", "mcp", or "agent" (a coding agent's own tool).
---@field subject string File path relative to the project root, the command, the host fetched from, or the MCP tool (`server__tool`).
---@field detail string Unified diff, "$ <command>\n(in <dir>)", or "Loopr wants to fetch <url>".

---@class loopr.PendingApproval
---@field id integer
---@field kind loopr.ApprovalKind
---@field subject string

---@class loopr.ShownApproval
---@field request loopr.ApprovalRequest
---@field buf integer
---@field origin integer|nil The window to return to; nil when focus was not taken.

---@type loopr.ShownApproval|nil
local shown = nil
---@type loopr.ApprovalRequest[]
local queue = {}

local DECISIONS = { accept = true, accept_all = true, reject = true }
local PLURAL = { write = 'writes', edit = 'edits', command = 'commands' }

---Whether a coding agent asks before one of its own tools acts (the host's `AGENT_OWN_TOOL`).
---@param req loopr.ApprovalRequest
---@return boolean
local function agent_own_tool(req)
  return req.tool == 'agent'
end

---What "accept all" accepts: fetches are accepted per host, the rest per kind.
---@param req loopr.ApprovalRequest
---@return string
local function all_of(req)
  if agent_own_tool(req) then
    -- The request's last line says what it allows: it depends on the call and the agent.
    return 'as said above'
  end
  if req.kind == 'fetch' then
    return ('fetches from %s in this loop'):format(req.subject)
  end
  if req.kind == 'mcp' then
    return ('calls of %s from now on in this loop'):format(req.subject)
  end
  return ('%s of this loop'):format(PLURAL[req.kind] or 'changes')
end

---@param s string
---@return string
local function one_line(s)
  return (s:gsub('%s*\n%s*', ' '))
end

---@param s string
---@return string
local function short(s)
  s = one_line(s)
  if vim.fn.strchars(s) <= SUBJECT_WIDTH then
    return s
  end
  return vim.fn.strcharpart(s, 0, SUBJECT_WIDTH - 1) .. '…'
end

---Code points that show as nothing (or as something else) and so could hide what a command
---does: no-break and other odd spaces, zero-width characters, bidirectional overrides (text
---shown in another order than it runs), the BOM, interlinear annotations, tag characters.
---@param cp integer
---@return boolean
local function invisible(cp)
  return (cp >= 0x80 and cp <= 0xA0)
    or cp == 0xAD
    or cp == 0x34F
    or cp == 0x61C
    or cp == 0x115F
    or cp == 0x1160
    or cp == 0x17B4
    or cp == 0x17B5
    or cp == 0x180E
    or (cp >= 0x2000 and cp <= 0x200F)
    or (cp >= 0x2028 and cp <= 0x202F)
    or (cp >= 0x205F and cp <= 0x206F)
    or cp == 0x3000
    or cp == 0x3164
    or cp == 0xFEFF
    or cp == 0xFFA0
    or (cp >= 0xFFF9 and cp <= 0xFFFB)
    or (cp >= 0xE0000 and cp <= 0xE007F)
end

---One line of a command as it must be reviewed: control characters as `^X`, bytes that are
---no UTF-8 as `<xx>`, invisible characters as `<xxxx>` (as |strtrans()| shows them), blanks at the end and long runs of
---blanks as `⟨N spaces⟩`: nothing in it can hide from the reader.
---@param line string
---@return string
function M.visible(line)
  local chars = {}
  for _, char in ipairs(vim.fn.split(vim.fn.strtrans(line), '\\zs')) do
    local cp = vim.fn.char2nr(char)
    chars[#chars + 1] = invisible(cp) and ('<%04x>'):format(cp) or char
  end
  local text = table.concat(chars)
  text = text:gsub('( +)$', function(blanks)
    return ('⟨%d trailing space%s⟩'):format(#blanks, #blanks == 1 and '' or 's')
  end)
  text = text:gsub('(    +)', function(blanks)
    return ('⟨%d spaces⟩'):format(#blanks)
  end)
  return text
end

---A command's lines made visible, each run of empty lines as one `⟨N empty lines⟩` (blank
---lines would otherwise push its tail out of the window).
---@param command string
---@return string[]
local function visible_lines(command)
  local lines, empty = {}, 0
  local function flush_empty()
    if empty > 0 then
      lines[#lines + 1] = ('⟨%d empty line%s⟩'):format(empty, empty == 1 and '' or 's')
      empty = 0
    end
  end
  for _, line in ipairs(vim.split(command, '\n', { plain = true })) do
    if line == '' then
      empty = empty + 1
    else
      flush_empty()
      lines[#lines + 1] = M.visible(line)
    end
  end
  flush_empty()
  return lines
end

---The lines of a command's review: every line of it, made visible, indented.
---@param command string
---@return string[]
local function command_lines(command)
  return vim.tbl_map(function(line)
    return '  ' .. line
  end, visible_lines(command))
end

---A command on one line for a message: its lines joined by ` ⏎ ` (never `|`, which would
---read as a pipe), made visible, with its size when it has more than one line.
---@param command string
---@return string
local function command_summary(command)
  local count = #vim.split(command, '\n', { plain = true })
  local size = count > 1 and (' (%d lines)'):format(count) or ''
  return table.concat(visible_lines(command), ' ⏎ ') .. size
end

---@param req loopr.ApprovalRequest
---@return string[]
local function render_command(req)
  -- The detail is "$ <command>\n(in <dir>)" and, when nothing confines the command, an
  -- "UNSANDBOXED: ..." line, which goes first: then this prompt is the only protection.
  local prefix = '$ ' .. req.subject
  local rest = vim.startswith(req.detail, prefix) and req.detail:sub(#prefix + 1) or ''
  local notes = vim.split(rest, '\n', { trimempty = true })
  local count = #vim.split(req.subject, '\n', { plain = true })
  local lines = {
    ('Loopr wants to run this command (loop %s), %d line%s, %d characters:'):format(
      req.loop_id,
      count,
      count == 1 and '' or 's',
      vim.fn.strchars(req.subject)
    ),
  }
  for _, note in ipairs(notes) do
    if vim.startswith(note, 'UNSANDBOXED') then
      table.insert(lines, 1, M.visible(note))
    end
  end
  table.insert(lines, '')
  vim.list_extend(lines, command_lines(req.subject))
  table.insert(lines, '')
  for _, note in ipairs(notes) do
    if not vim.startswith(note, 'UNSANDBOXED') then
      table.insert(lines, M.visible(note))
    end
  end
  return lines
end

---@param req loopr.ApprovalRequest
---@return string[]
local function render_agent_call(req)
  local lines = {
    ('The coding agent asks to use its own tool: %s (loop %s)'):format(M.visible(one_line(req.subject)), req.loop_id),
    '',
  }
  -- What the agent wrote (its command, its raw input) is made visible like a command; its
  -- diffs, which come after the command and the rest, are kept as they are.
  local in_diff = false
  for _, line in ipairs(vim.split(req.detail, '\n', { trimempty = true })) do
    in_diff = in_diff or vim.startswith(line, '--- ')
    -- An input's indentation stays as it is.
    local indent, rest = line:match('^( *)(.*)$')
    table.insert(lines, in_diff and line or indent .. M.visible(rest))
  end
  return lines
end

---@param req loopr.ApprovalRequest
---@return string[]
local function render(req)
  local lines
  if agent_own_tool(req) then
    lines = render_agent_call(req)
  elseif req.kind == 'command' then
    lines = render_command(req)
  else
    local header = req.kind == 'mcp'
        and ('Loopr wants to call the MCP tool %s (loop %s)'):format(req.subject, req.loop_id)
      or ('Loopr wants to %s %s (loop %s)'):format(req.kind, one_line(req.subject), req.loop_id)
    local detail = vim.split(req.detail, '\n', { trimempty = true })
    if req.kind == 'fetch' then
      -- The detail's first line says it all ("Loopr wants to fetch <url>").
      header = ('%s (loop %s)'):format(table.remove(detail, 1) or header, req.loop_id)
    end
    lines = { header, '' }
    vim.list_extend(lines, detail)
  end
  table.insert(lines, '')
  table.insert(lines, ('a accept · A accept all %s · r reject with a reason · q reject'):format(all_of(req)))
  return lines
end

---@param id integer
---@return string
local function name_of(id)
  return ('loopr://approval/%d'):format(id)
end

---@param buf integer
---@param req loopr.ApprovalRequest
local function keymaps(buf, req)
  ---@param lhs string
  ---@param desc string
  ---@param fn fun()
  local function map(lhs, desc, fn)
    vim.keymap.set('n', lhs, fn, { buffer = buf, nowait = true, desc = desc })
  end
  map('a', 'Loopr: accept this change', function()
    M.answer(req.id, 'accept')
  end)
  map('A', ('Loopr: accept all %s'):format(all_of(req)), function()
    M.answer(req.id, 'accept_all')
  end)
  map('r', 'Loopr: reject this change with a reason', function()
    vim.ui.input({ prompt = 'Loopr: reason for rejecting (for the model): ' }, function(reason)
      -- Cancelling the prompt (nil) leaves the request open; an empty reason rejects.
      if reason ~= nil then
        M.answer(req.id, 'reject', reason)
      end
    end)
  end)
  map('q', 'Loopr: reject this change (closed without a decision)', function()
    M.answer(req.id, 'reject', CLOSED)
  end)
end

---@param req loopr.ApprovalRequest
---@return integer buf
local function create(req)
  local name = name_of(req.id)
  for _, stale in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_get_name(stale) == name then
      vim.api.nvim_buf_delete(stale, { force = true })
    end
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].swapfile = false
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, render(req))
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = agent_own_tool(req) and (req.kind == 'edit' and 'diff' or 'text')
    or ({ command = 'sh', fetch = 'text', mcp = 'text' })[req.kind]
    or 'diff'
  keymaps(buf, req)
  vim.api.nvim_create_autocmd('BufWipeout', {
    buffer = buf,
    once = true,
    desc = 'Loopr: a review buffer closed by other means rejects its request',
    callback = function()
      vim.schedule(function()
        if shown and shown.buf == buf then
          M.answer(req.id, 'reject', CLOSED)
        end
      end)
    end,
  })
  return buf
end

---Show `req` in a split below; focus moves there only when the user is not typing.
---@param req loopr.ApprovalRequest
local function show(req)
  local buf = create(req)
  local enter = not require('loopr.ui').typing()
  local origin = vim.api.nvim_get_current_win()
  local height = math.min(vim.api.nvim_buf_line_count(buf), MAX_HEIGHT)
  shown = { request = req, buf = buf, origin = enter and origin or nil }
  local ok, win = pcall(vim.api.nvim_open_win, buf, enter, { split = 'below', win = -1, height = height })
  if ok then
    vim.wo[win].winfixheight = true
    -- A command is read whole, wrapped; a diff keeps its columns.
    vim.wo[win].wrap = req.kind ~= 'write' and req.kind ~= 'edit'
    local fits, text_height = pcall(vim.api.nvim_win_text_height, win, {})
    if fits then
      -- A command may take up to two thirds of the screen; what still does not fit is said
      -- above it, where it cannot scroll away.
      local most = req.kind == 'command' and math.max(MAX_HEIGHT, math.floor(vim.o.lines * 2 / 3)) or MAX_HEIGHT
      vim.api.nvim_win_set_height(win, math.min(text_height.all, most))
      if text_height.all > vim.api.nvim_win_get_height(win) then
        vim.wo[win].winbar = '%#WarningMsg#Taller than this window: scroll to read all of it before you answer'
      end
    end
  else
    require('loopr.notify').notify(
      ('Loopr: cannot open %s (%s); use :sbuffer'):format(name_of(req.id), win),
      vim.log.levels.WARN
    )
  end
  -- A command is never cut here: its tail may be what matters ("cargo test<200 blanks>;
  -- curl ... | sh"); the message shows what fits and keeps all of it in :messages.
  local subject = req.kind == 'command' and command_summary(req.subject) or short(req.subject)
  require('loopr.notify').notify(
    ('Loopr: approve %s %s? a accept · A accept all · r reject'):format(
      agent_own_tool(req) and "the agent's own tool" or req.kind,
      subject
    ),
    vim.log.levels.INFO
  )
end

local function show_next()
  if not shown and #queue > 0 then
    show(table.remove(queue, 1))
  end
end

---Close the review UI of request `id` (shown or queued); the next request shows.
---@param id integer
function M.close(id)
  for i, req in ipairs(queue) do
    if req.id == id then
      table.remove(queue, i)
      return
    end
  end
  if not (shown and shown.request.id == id) then
    return
  end
  local current = shown
  shown = nil
  if vim.api.nvim_buf_is_valid(current.buf) then
    local origin = current.origin
    if vim.api.nvim_get_current_buf() == current.buf and origin and vim.api.nvim_win_is_valid(origin) then
      vim.api.nvim_set_current_win(origin)
    end
    vim.api.nvim_buf_delete(current.buf, { force = true })
  end
  show_next()
end

---Forget every request: the host that asked has exited, and a new host numbers its own.
function M.reset()
  queue = {}
  local current = shown
  shown = nil
  if current and vim.api.nvim_buf_is_valid(current.buf) then
    vim.api.nvim_buf_delete(current.buf, { force = true })
  end
end

---A code loop asks to make a change: show it, or queue it behind the one shown.
---@param ev table The `approval_requested` event.
---@return loopr.ApprovalRequest req
function M.request(ev)
  ---@type loopr.ApprovalRequest
  local req = {
    id = assert(tonumber(ev.id), 'approval_requested without an id'),
    loop_id = tostring(ev.loop_id or '?'),
    kind = ev.kind,
    tool = tostring(ev.tool or ''),
    subject = tostring(ev.subject or ''),
    detail = type(ev.detail) == 'string' and ev.detail or '',
  }
  for _, p in ipairs(M.pending()) do
    if p.id == req.id then
      return req
    end
  end
  if shown then
    table.insert(queue, req)
  else
    show(req)
  end
  return req
end

---Answer request `id` and close its review buffer (the next request shows).
---The review buffer closes at once; the answer goes to the host without waiting for it.
---@param id integer
---@param decision loopr.Decision
---@param reason? string For "reject": why, for the model.
---@param on_done? fun(answered: boolean|nil) Called with false when the request no longer waited, nil on error (notified).
---@return boolean sent false for an unknown decision (notified).
function M.answer(id, decision, reason, on_done)
  if not DECISIONS[decision] then
    require('loopr.notify').notify(('Loopr: unknown decision %s'):format(vim.inspect(decision)), vim.log.levels.ERROR)
    return false
  end
  require('loopr.host').send('approval', { id = id, decision = decision, reason = reason }, function(result, err)
    if err then
      require('loopr.notify').notify(err, vim.log.levels.ERROR)
    end
    if on_done then
      on_done((not err) and result == true or nil)
    end
  end)
  M.close(id)
  return true
end

---Requests awaiting an answer: the one shown first, then the queued ones.
---@return loopr.PendingApproval[]
function M.pending()
  local list = {}
  for _, req in ipairs(shown and vim.list_extend({ shown.request }, queue) or queue) do
    table.insert(list, { id = req.id, kind = req.kind, subject = req.subject })
  end
  return list
end

return M

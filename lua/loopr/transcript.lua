-- `loopr://transcript/<id>` buffers: a loop's transcript as the host renders it, followed
-- live. The host sends text (`append`), batched; it only ever goes at the end of the buffer,
-- so an update costs the same at the 10,000th line as at the first. Like `tail -f`, a window
-- whose cursor is on the last line keeps it there; a cursor the user moved up stays where it
-- is. Wiping the buffer stops the host sending.

local M = {}

vim.api.nvim_set_hl(0, 'LooprTranscriptHeading', { link = 'Title', default = true })
vim.api.nvim_set_hl(0, 'LooprTranscriptCall', { link = 'Function', default = true })
vim.api.nvim_set_hl(0, 'LooprTranscriptResult', { link = 'Identifier', default = true })
vim.api.nvim_set_hl(0, 'LooprTranscriptError', { link = 'ErrorMsg', default = true })
vim.api.nvim_set_hl(0, 'LooprTranscriptFooter', { link = 'Comment', default = true })
vim.api.nvim_set_hl(0, 'LooprTranscriptQuote', { link = 'String', default = true })

---Highlighting made of single-line matches anchored at the start of a line (an error mark is
---looked for only in call and result lines): a redraw after an append costs the lines shown,
---never a resync of regions (Markdown's own syntax made Neovim's p99 latency with 8
---transcripts streaming 2.5 times that without).
local SYNTAX = [[
syntax match LooprTranscriptHeading /^#\{1,4} .*$/
syntax match LooprTranscriptCall /^→ .*$/ contains=LooprTranscriptError
syntax match LooprTranscriptCall /^<details><summary>→ .*$/
syntax match LooprTranscriptResult /^← .*$/ contains=LooprTranscriptError
syntax match LooprTranscriptResult /^<details><summary>← .*$/
syntax match LooprTranscriptError /✗ .*$/ contained
syntax match LooprTranscriptFooter /^_turn .*_$/
syntax match LooprTranscriptFooter /^↻ .*$/
syntax match LooprTranscriptQuote /^>.*$/
syntax match LooprTranscriptQuote /^\*\*Loopr → model:\*\*$/
]]

---Buffer of each follow token; the host sends text with the token it was given.
---@type table<integer, integer>
local followed = {}
---Transcript buffer of each loop id.
---@type table<string, integer>
local by_loop = {}
local last_token = 0

---@class loopr.TranscriptText
---@field token integer
---@field text string

---@param buf integer
---@param token integer
local function close(buf, token)
  followed[token] = nil
  for id, b in pairs(by_loop) do
    if b == buf then
      by_loop[id] = nil
    end
  end
  local host = require('loopr.host')
  if host.chan() then
    -- Nothing to wait for; a host that is gone has stopped sending anyway.
    host.send('transcript_close', { token = token }, function() end)
  end
end

---Window options of `win`, which shows a transcript (local to the transcript, so a buffer the
---user opens in the window later gets the window's own): long blocks are `<details>`, folded.
---@param win integer
local function window_options(win)
  -- The window may have opened without focus (the user typing elsewhere): not `vim.wo`.
  local wo = vim.wo[win][0]
  wo.foldmethod = 'marker'
  wo.foldmarker = '<details>,</details>'
  wo.foldlevel = 0
  wo.foldtext = "v:lua.require'loopr.transcript'.foldtext()"
  wo.wrap = true
  wo.linebreak = true
  if vim.fn.exists('+eventignorewin') == 1 then
    -- A followed transcript scrolls and changes dozens of times a second: each would run
    -- every WinScrolled and TextChanged handler (matchparen's among them) for nothing the
    -- user did.
    wo.eventignorewin = 'WinScrolled,TextChanged'
  end
end

---A hidden scratch buffer that follows `token`.
---@param token integer
---@return integer buf
local function new_buffer(token)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].swapfile = false
  vim.bo[buf].undolevels = -1
  vim.bo[buf].modifiable = false
  followed[token] = buf
  vim.api.nvim_create_autocmd('BufWipeout', {
    buffer = buf,
    once = true,
    desc = 'Loopr: stop following this transcript',
    callback = function()
      close(buf, token)
    end,
  })
  vim.api.nvim_create_autocmd('BufWinEnter', {
    buffer = buf,
    desc = 'Loopr: transcript window options',
    callback = function()
      -- Neovim runs BufWinEnter in the window the buffer enters, focused or not. Only that
      -- one: the others showing the transcript keep the folds the user opened there.
      local win = vim.api.nvim_get_current_win()
      if vim.api.nvim_win_get_buf(win) == buf then
        window_options(win)
      end
    end,
  })
  return buf
end

---Text of a closed fold: the block's summary.
---@return string
function M.foldtext()
  local line = vim.fn.getline(vim.v.foldstart)
  local summary = line:match('<summary>(.-)</summary>') or line
  return ('▸ %s  [%d lines]'):format(summary, vim.v.foldend - vim.v.foldstart + 1)
end

---Open the transcript of loop `id`: by default the loop of the artifact in the current
---buffer, else the newest running loop. It shows what the loop's journal holds, then follows
---the loop live while the buffer exists. Neovim does not wait for the host: the window opens
---when it answers.
---@param id string|nil
---@param opts? { root?: string }
---@param on_done? fun(buf: integer|nil) Called with the buffer, nil on error (already notified).
function M.open(id, opts, on_done)
  on_done = on_done or function() end
  id = id and vim.trim(id) or nil
  if id == '' then
    id = nil
  end
  local name = vim.api.nvim_buf_get_name(0)
  last_token = last_token + 1
  local token = last_token
  -- The buffer exists before the request: text may arrive before the answer does.
  local buf = new_buffer(token)
  require('loopr.host').send('transcript', {
    root = (opts and opts.root) or require('loopr.config').root(),
    id = id,
    path = name ~= '' and name or nil,
    token = token,
  }, function(reply, err)
    if err or type(reply) ~= 'table' or type(reply.loop_id) ~= 'string' then
      if vim.api.nvim_buf_is_valid(buf) then
        vim.api.nvim_buf_delete(buf, { force = true })
      end
      require('loopr.notify').notify(
        err or ('Loopr: unexpected reply to transcript: %s'):format(vim.inspect(reply)),
        vim.log.levels.ERROR
      )
      return on_done(nil)
    end
    local open = by_loop[reply.loop_id]
    if open and vim.api.nvim_buf_is_valid(open) then
      -- Already followed: show that one.
      vim.api.nvim_buf_delete(buf, { force = true })
      buf = open
    else
      by_loop[reply.loop_id] = buf
      vim.api.nvim_buf_set_name(buf, 'loopr://transcript/' .. reply.loop_id)
      -- Markdown text with its own light highlighting (`:setfiletype markdown` for the full one).
      vim.bo[buf].filetype = 'loopr-transcript'
      vim.api.nvim_buf_call(buf, function()
        vim.cmd(SYNTAX)
      end)
      vim.b[buf].loopr_loop_id = reply.loop_id
      vim.b[buf].loopr_transcript_token = token
      vim.b[buf].loopr_name = ('Loopr transcript: %s %s'):format(reply.loop_type, reply.loop_id)
      require('loopr.ui').map_close(buf, 'transcript')
    end
    local win = require('loopr.ui').show(buf)
    if win then
      -- At the end, so that it follows (`append_text`).
      vim.api.nvim_win_set_cursor(win, { vim.api.nvim_buf_line_count(buf), 0 })
    end
    on_done(buf)
  end)
end

---Whether the current window's cursor may follow new text: not while the user selects text
---(Visual or Select mode) or types an operator's motion.
---@return boolean
local function current_may_follow()
  local mode = vim.api.nvim_get_mode().mode
  return not (mode:find('^[vVsS\22\19]') or mode:find('^no'))
end

---@param buf integer
---@param text string
local function append_text(buf, text)
  local count = vim.api.nvim_buf_line_count(buf)
  local last = vim.api.nvim_buf_get_lines(buf, count - 1, count, true)[1]
  local current = vim.api.nvim_get_current_win()
  local cursors = {}
  -- (The API, not `win_findbuf()`: this runs for every piece of every followed transcript.)
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    if vim.api.nvim_win_get_buf(win) == buf then
      cursors[win] = vim.api.nvim_win_get_cursor(win)
    end
  end
  local buffer_option = { buf = buf }
  vim.api.nvim_set_option_value('modifiable', true, buffer_option)
  vim.api.nvim_buf_set_text(buf, count - 1, #last, count - 1, #last, vim.split(text, '\n', { plain = true }))
  vim.api.nvim_set_option_value('modifiable', false, buffer_option)
  local new_count = vim.api.nvim_buf_line_count(buf)
  -- Only a block that starts here makes a new fold (most text is streamed words).
  local new_block = new_count > count and (last:sub(-8) .. text):find('<details>', 1, true) ~= nil
  for win in pairs(cursors) do
    if new_block then
      -- Blocks that came in are folded like the ones there before ('foldlevel' 0 applies
      -- only when folds are first made).
      vim.api.nvim_win_call(win, function()
        vim.cmd(('silent! %d,%dfoldclose'):format(count + 1, new_count))
      end)
    end
  end
  local current_follows = current_may_follow()
  for win, cursor in pairs(cursors) do
    if cursor[1] == count and (win ~= current or current_follows) then
      -- At the end: it follows the end (already there when the text went on the last line).
      if new_count > count then
        vim.api.nvim_win_set_cursor(win, { new_count, 0 })
      end
    elseif not vim.deep_equal(vim.api.nvim_win_get_cursor(win), cursor) then
      -- Text inserted where the cursor was (an empty last line) pushed it along.
      vim.api.nvim_win_set_cursor(win, cursor)
    end
  end
end

---Called by the host with text for followed transcripts, in order.
---@param items loopr.TranscriptText[]
function M.append(items)
  for _, item in ipairs(items) do
    local buf = followed[item.token]
    if buf and vim.api.nvim_buf_is_valid(buf) then
      append_text(buf, item.text)
    end
  end
end

return M

-- The one way Loopr messages reach the user. Loopr's messages arrive while the user types,
-- so with Neovim's own vim.notify none may open the hit-enter prompt, which would take the
-- next key: each shows as one line fitted to the command line (`v:echospace`), and its whole
-- text goes to |:messages|. A vim.notify the user installed (nvim-notify, noice, snacks)
-- gets the whole message instead.

local M = {}

local PREFIX = 'Loopr: '
local levels = vim.log.levels
---Milliseconds a warning or error stays on the command line before progress may replace it.
local IMPORTANT_HOLD_MS = 4000

---@class loopr.Message
---@field text string
---@field level integer
---@field history boolean Whether it goes to :messages (progress does not).
---@field keep? string How `text` ends: kept whole when the line is cut to fit.

---@class loopr.NotifyOpts
---@field keep? string Appended to the message and kept whole on the command line, where the
---message before it is cut instead: what to do next.

---@type loopr.Message[]
local pending = {}
local flush_scheduled = false
---When the last warning or error was put on the command line (`vim.uv.now()`).
local important_shown_at = nil

---`msg` with the one prefix every Loopr message carries ("Loopr: "), whatever prefix (or
---none) it came with.
---@param msg any
---@return string
function M.prefixed(msg)
  local text = vim.trim(type(msg) == 'string' and msg or vim.inspect(msg))
  text = text:gsub('^[Ll][Oo][Oo][Pp][Rr]:%s*', '')
  return PREFIX .. text
end

---Whether vim.notify is still Neovim's own (which echoes, and so can open hit-enter prompts).
---@return boolean
local function stock_notify()
  local info = debug.getinfo(vim.notify, 'S')
  return info ~= nil and info.source == '@vim/_editor.lua'
end

---One line: line breaks become " | " and other control characters spaces.
---@param text string
---@return string
local function one_line(text)
  text = text:gsub('%s*\n%s*', ' | '):gsub('%c', ' ')
  text = text:gsub(':%s*|%s*', ': ')
  return text
end

---`text` cut to fit `width` display cells (wide characters take two), marked with "…" when
---cut.
---@param text string
---@param width integer
---@return string
function M.fit(text, width)
  width = math.max(width, 1)
  if vim.fn.strdisplaywidth(text) <= width then
    return text
  end
  local chars = vim.fn.strchars(text)
  local low, high = 0, chars
  -- The longest prefix that leaves room for the ellipsis.
  while low < high do
    local mid = math.ceil((low + high) / 2)
    if vim.fn.strdisplaywidth(vim.fn.strcharpart(text, 0, mid)) <= width - 1 then
      low = mid
    else
      high = mid - 1
    end
  end
  return vim.fn.strcharpart(text, 0, low) .. '…'
end

---`message`'s text cut to fit `width` display cells, keeping its `keep` ending whole while
---that leaves room for at least as much of what comes before.
---@param message loopr.Message
---@param width integer
---@return string
local function fit_message(message, width)
  local keep = message.keep
  local text = message.text
  if not keep or vim.fn.strdisplaywidth(text) <= width then
    return M.fit(text, width)
  end
  local room = width - vim.fn.strdisplaywidth(keep)
  if room < vim.fn.strdisplaywidth(keep) then
    return M.fit(text, width)
  end
  return M.fit(text:sub(1, #text - #keep), room) .. keep
end

---@param level integer
---@return string|nil
local function highlight(level)
  if level >= levels.ERROR then
    return 'ErrorMsg'
  elseif level == levels.WARN then
    return 'WarningMsg'
  end
end

---Adds `text` to :messages. Displaying it would wrap a long text into a hit-enter prompt;
---with 'shortmess' "T" Neovim truncates the display of an `:echomsg` that does not fit and
---still keeps the whole text in the history.
---@param text string One line.
---@param hl string|nil
local function remember(text, hl)
  local shortmess = vim.o.shortmess
  if not shortmess:find('T', 1, true) then
    vim.o.shortmess = shortmess .. 'T'
  end
  vim.cmd.echohl(hl or 'None')
  local ok, err = pcall(vim.cmd.echomsg, vim.fn.string(text))
  vim.cmd.echohl('None')
  if vim.o.shortmess ~= shortmess then
    vim.o.shortmess = shortmess
  end
  if not ok then
    vim.api.nvim_echo({ { M.fit(one_line(tostring(err)), vim.v.echospace - 1) } }, false, {})
  end
end

---Shows what `pending` holds: each message with history goes to :messages in arrival order,
---then the most severe (the latest of equals) stays on the command line.
local function flush()
  flush_scheduled = false
  local batch = pending
  pending = {}
  local top = nil
  for _, message in ipairs(batch) do
    if message.history then
      remember(message.text, highlight(message.level))
    end
    if not top or message.level >= top.level then
      top = message
    end
  end
  if not top then
    return
  end
  local now = vim.uv.now()
  local holding = important_shown_at and now - important_shown_at < IMPORTANT_HOLD_MS
  if not top.history and holding then
    return
  end
  if top.level >= levels.WARN then
    important_shown_at = now
  end
  -- One line that fits before 'showcmd' and 'ruler', never into a hit-enter prompt.
  vim.api.nvim_echo({ { fit_message(top, vim.v.echospace - 1), highlight(top.level) } }, false, {})
end

---@param message loopr.Message
local function enqueue(message)
  table.insert(pending, message)
  if not flush_scheduled then
    flush_scheduled = true
    -- Messages that arrive together (several loops failing at once) show as one.
    vim.schedule(flush)
  end
end

---Tell the user something: `msg` gets the "Loopr: " prefix. With Neovim's own vim.notify it
---shows as one fitted line (messages arriving together are coalesced, the most severe
---shown; `opts.keep`, appended, stays whole where the line is cut) and its whole text goes
---to :messages; a replaced vim.notify gets the whole text.
---@param msg string
---@param level? integer A |vim.log.levels| value; default INFO.
---@param opts? loopr.NotifyOpts
function M.notify(msg, level, opts)
  level = level or levels.INFO
  local keep = opts and opts.keep and one_line(opts.keep) or nil
  local text = M.prefixed(msg) .. (keep or '')
  if not stock_notify() then
    vim.notify(text, level, { title = 'Loopr' })
    return
  end
  enqueue({ text = one_line(text), level = level, history = true, keep = keep })
end

---Show a progress message on the command line (not in :messages), unless a recent warning
---or error is still showing there.
---@param msg string
function M.progress(msg)
  enqueue({ text = one_line(M.prefixed(msg)), level = levels.DEBUG, history = false })
end

return M

-- Latest progress message per running loop, for statuslines; when nothing runs, what the
-- last tree whose work stopped has ready.

local M = {}

---@class loopr.ProgressEntry
---@field message string
---@field seq integer Update order; the highest is shown.

---@type table<string, loopr.ProgressEntry>
local entries = {}
local seq = 0
---Loops that stopped; late messages for them are ignored.
---@type table<string, true>
local finished = {}
---What the last tree whose work stopped has ready, until a loop runs again.
---@type string|nil
local ready = nil

---Record the latest message of a loop.
---@param loop_id string
---@param message string
function M.set(loop_id, message)
  if finished[loop_id] then
    return
  end
  seq = seq + 1
  entries[loop_id] = { message = message, seq = seq }
end

---Mark a loop as running; records `message` only if the loop has none yet.
---@param loop_id string
---@param message string
function M.touch(loop_id, message)
  finished[loop_id] = nil
  ready = nil
  if not entries[loop_id] then
    M.set(loop_id, message)
  end
end

---Forget a loop (it stopped running).
---@param loop_id string
function M.clear(loop_id)
  entries[loop_id] = nil
  finished[loop_id] = true
end

---A tree's work stopped: `message` (the host's words, prefixed) says what it has ready.
---@param message string
function M.ready(message)
  ready = message
end

---The newest message of the running loops, and how many run.
---@return loopr.ProgressEntry|nil latest
---@return integer count
local function newest()
  local latest, count = nil, 0
  for _, e in pairs(entries) do
    count = count + 1
    if not latest or e.seq > latest.seq then
      latest = e
    end
  end
  return latest, count
end

---The newest message of the running loops, nil when none runs.
---@return string|nil
function M.latest()
  local latest = newest()
  return latest and latest.message
end

---Statusline text: "Loopr: <latest message>", "Loopr (N): ..." with several
---running loops; when nothing runs, what is ready, else "".
---@return string
function M.get()
  local latest, count = newest()
  if not latest then
    return ready or ''
  end
  local label = count > 1 and ('Loopr (%d): '):format(count) or 'Loopr: '
  return label .. latest.message
end

return M

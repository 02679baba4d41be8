-- Latest progress message per running loop, for statuslines.

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

---Statusline text: "Loopr: <latest message>", "Loopr (N): ..." with several
---running loops, "" when nothing runs.
---@return string
function M.get()
  local latest, count = nil, 0
  for _, e in pairs(entries) do
    count = count + 1
    if not latest or e.seq > latest.seq then
      latest = e
    end
  end
  if not latest then
    return ''
  end
  local label = count > 1 and ('Loopr (%d): '):format(count) or 'Loopr: '
  return label .. latest.message
end

return M

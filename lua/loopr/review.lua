-- Artifact buffers (`plan.md`, `spec.md`, `phase.md` and their `.json`) as review buffers. They
-- cannot be changed: approval takes the stored artifact, and a revision is the way to change
-- it. Their winbar says where the artifact stands and which keys act on it. The keys are one
-- table, `M.keys`: the buffer's keymaps, the winbar's words and the check of
-- |loopr-review| in the help all come from it.

local M = {}

---What the host says of an artifact's loop, and whether the buffer shows an older iteration.
---@class loopr.ReviewState
---@field record loopr.LoopRecord
---@field newer integer|nil The loop's newest iteration when the buffer shows an older one.

---@class loopr.ReviewKey
---@field lhs string
---@field hint string Its word in the winbar (as the status window's keys have it).
---@field desc string What it does, as `:map` lists it.
---@field offered fun(state: loopr.ReviewState): boolean Whether the winbar lists it now.
---@field run fun(ref: loopr.ArtifactRef, buf: integer)

---@param state loopr.ReviewState
---@return boolean
local function current(state)
  return state.newer == nil and state.record.status ~= 'invalidated'
end

---Offered on the current iteration when the loop's record says `field` (a host rule).
---@param field string
---@return fun(state: loopr.ReviewState): boolean
local function current_and(field)
  return function(state)
    return current(state) and state.record[field] == true
  end
end

---@return boolean
local function always()
  return true
end

---Runs `require('loopr')[command]` on the artifact's loop.
---@param command string
---@return fun(ref: loopr.ArtifactRef)
local function on_loop(command)
  return function(ref)
    require('loopr')[command](ref.loop_id)
  end
end

---Where each attached buffer's artifact stands, as the host last said.
---@type table<integer, loopr.ReviewState|nil>
local states = {}

---@type loopr.ReviewKey[]
M.keys = {
  {
    lhs = 'a',
    hint = 'approve',
    desc = 'Loopr: approve this artifact (:LooprApprove)',
    offered = current_and('awaits_approval'),
    run = on_loop('approve'),
  },
  {
    lhs = 'r',
    hint = 'revise',
    desc = 'Loopr: revise this artifact; asks for the feedback (:LooprRevise)',
    -- The host's rule (`revisable`) for a loop that wrote its artifact.
    offered = current_and('idle'),
    run = function(ref)
      -- Without feedback, :LooprRevise asks for it.
      require('loopr').revise('', { id = ref.loop_id })
    end,
  },
  {
    lhs = 'R',
    hint = 'retry',
    desc = "Loopr: retry this artifact's loop (:LooprRetry)",
    offered = current_and('retryable'),
    run = on_loop('retry'),
  },
  {
    lhs = 't',
    hint = 'transcript',
    desc = "Loopr: follow the transcript of this artifact's loop (:LooprTranscript)",
    offered = always,
    run = on_loop('transcript'),
  },
  {
    lhs = 'q',
    hint = 'close',
    desc = 'Loopr: close this window',
    offered = always,
    run = function(_, buf)
      require('loopr.ui').close(buf)
    end,
  },
}

---How the winbar words a loop's status (|loopr-statuses|) for its artifact.
local STATUS_WORDS = {
  awaiting_approval = 'Awaiting review',
  complete = 'Approved',
  invalidated = 'Superseded: an earlier artifact was revised',
  running = 'Running',
  pending = 'Waiting to run',
  failed = 'Failed',
  cancelled = 'Cancelled',
  interrupted = 'Interrupted',
  paused = 'Paused at its budget',
}

---The hint for `state`: where the artifact stands, then the keys that act on it now.
---@param state loopr.ReviewState|nil
---@return string
function M.hint(state)
  if not state then
    return ''
  end
  local status = state.record.status
  local parts = {
    state.newer and ('Superseded by iteration %d'):format(state.newer) or STATUS_WORDS[status] or status,
  }
  for _, key in ipairs(M.keys) do
    if key.offered(state) then
      table.insert(parts, ('%s %s'):format(key.lhs, key.hint))
    end
  end
  return table.concat(parts, ' · ')
end

---Artifact buffers Loopr keeps the hint of, with the artifact each shows.
---@type table<integer, loopr.ArtifactRef>
local attached = {}
local GROUP = vim.api.nvim_create_augroup('loopr_review', { clear = true })

---Shows buffer `buf`'s hint in window `win`, for that buffer only (a buffer opened in the
---window later gets the window's own winbar).
---@param win integer
---@param buf integer
local function show_in(win, buf)
  local hint = M.hint(states[buf]):gsub('%%', '%%%%')
  -- A narrow window cuts the hint's end (`%<`), keeping the state and the first keys.
  local winbar = hint ~= '' and hint .. '%<' or ''
  vim.api.nvim_set_option_value('winbar', winbar, { win = win, scope = 'local' })
end

---The newest iteration of the loop when `buf` shows an older one.
---@param buf integer
---@param record loopr.LoopRecord
---@return integer|nil
local function newer_iteration(buf, record)
  local shown = tonumber(vim.api.nvim_buf_get_name(buf):match('/iterations/(%d+)/artifacts/[^/]+$'))
  local newest = tonumber(record.iteration)
  if shown and newest and shown < newest then
    return newest
  end
end

local asking, ask_again = false, false

---Asks the host where the loops of the attached buffers stand and updates their hints: each
---buffer's loop is asked of the project it was opened in, whichever project the current
---buffer belongs to. One round of questions at a time; a refresh asked for meanwhile asks
---again after it.
function M.refresh()
  if asking then
    ask_again = true
    return
  end
  local roots = {}
  for buf, ref in pairs(attached) do
    if vim.api.nvim_buf_is_valid(buf) then
      roots[ref.root] = true
    else
      attached[buf], states[buf] = nil, nil
    end
  end
  if next(roots) == nil then
    return
  end
  asking = true
  local waiting = vim.tbl_count(roots)
  for root in pairs(roots) do
    require('loopr.host').send('status', { root = root }, function(rows)
      local records = {}
      for _, r in ipairs(type(rows) == 'table' and rows or {}) do
        records[r.id] = r
      end
      for buf, ref in pairs(attached) do
        if ref.root == root and vim.api.nvim_buf_is_valid(buf) then
          local record = records[ref.loop_id]
          states[buf] = record and { record = record, newer = newer_iteration(buf, record) } or nil
          for _, win in ipairs(vim.fn.win_findbuf(buf)) do
            show_in(win, buf)
          end
        end
      end
      waiting = waiting - 1
      if waiting == 0 then
        asking = false
        if ask_again then
          ask_again = false
          M.refresh()
        end
      end
    end)
  end
end

-- Loaded when the first artifact is read: from then on a loop's change updates the hints.
vim.api.nvim_create_autocmd('User', {
  group = GROUP,
  pattern = 'LooprLoopUpdated',
  desc = 'Loopr: update the review hints',
  callback = M.refresh,
})

---Makes buffer `buf` a review buffer if it holds an artifact: not modifiable, the keys of
---`M.keys`, and a winbar that follows its loop. Called each time the buffer is read.
---@param buf integer
function M.attach(buf)
  local ref = require('loopr.paths').buf_artifact(buf)
  if not ref then
    return
  end
  -- Reading the file set 'readonly' from its permissions; 'modifiable' stays.
  vim.bo[buf].modifiable = false
  vim.bo[buf].readonly = true
  -- The project the artifact was opened in: where its loop is asked about from now on.
  ref.root = require('loopr.config').root()
  attached[buf] = ref
  for _, key in ipairs(M.keys) do
    vim.keymap.set('n', key.lhs, function()
      key.run(ref, buf)
    end, { buffer = buf, nowait = true, desc = key.desc })
  end
  vim.api.nvim_clear_autocmds({ group = GROUP, buffer = buf })
  vim.api.nvim_create_autocmd('BufWinEnter', {
    group = GROUP,
    buffer = buf,
    desc = 'Loopr: the review hint in the winbar',
    callback = function()
      -- Neovim runs BufWinEnter in the window the buffer enters, focused or not.
      local win = vim.api.nvim_get_current_win()
      if vim.api.nvim_win_get_buf(win) == buf then
        show_in(win, buf)
      end
    end,
  })
  vim.api.nvim_create_autocmd('BufUnload', {
    group = GROUP,
    buffer = buf,
    desc = 'Loopr: forget the review buffer',
    callback = function()
      attached[buf], states[buf] = nil, nil
    end,
  })
  M.refresh()
end

return M

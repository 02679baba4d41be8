-- A spec's requirements not yet verified as a quickfix list (`:LooprRequirements`), each at
-- its line in spec.md. The host decides what is verified and where each line is.

local M = {}

---Quickfix items and the list's title for a `requirements` reply: one entry per requirement
---not yet verified, `R2: <text> (<why>)`.
---@param reply loopr.RequirementsReply
---@return vim.quickfix.entry[] items
---@return string title
function M.convert(reply)
  local items = {}
  for _, item in ipairs(type(reply.items) == 'table' and reply.items or {}) do
    table.insert(items, {
      filename = reply.path,
      lnum = item.lnum,
      col = 1,
      text = ('%s: %s (%s)'):format(item.id, item.text, item.why),
      valid = 1,
    })
  end
  return items, ('Loopr: %s requirements'):format(reply.spec)
end

---Fetch the requirements of a spec not yet verified and show them in the quickfix window.
---@param spec string|nil A spec name; nil: the spec of the current artifact buffer (a spec.md,
---or the spec of a phase.md), else the newest spec.
---@param root string Project root.
---@param loop_id? string A loop whose spec is meant (a spec, its phase or code loop).
---@return integer|nil qf_id nil on error (notified).
function M.open(spec, root, loop_id)
  local here = not (spec or loop_id) and require('loopr.paths').buf_artifact() or nil
  local params = { root = root, spec = spec, loop_id = loop_id or (here and here.loop_id) or nil }
  local reply, err = require('loopr.host').request('requirements', params)
  if err or type(reply) ~= 'table' then
    require('loopr.notify').notify(err or 'Loopr: no answer about the requirements', vim.log.levels.ERROR)
    return nil
  end
  local items, title = M.convert(reply)
  local id = require('loopr.qf').set({ title = title, items = items })
  if #items == 0 then
    local message = ('Loopr: spec %s: %s'):format(reply.spec, reply.coverage)
    require('loopr.notify').notify(message, vim.log.levels.INFO)
    return id
  end
  vim.cmd('botright copen')
  return id
end

return M

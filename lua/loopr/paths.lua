-- Recognising the host's state ($LOOPR_HOME) and artifact paths in it. Where a project's
-- state lives is the host's business alone (`loopr has-state`, `artifact_path`).

local M = {}

---@class loopr.ArtifactRef
---@field loop_id string
---@field kind string "plan", "spec" or "phase".
---@field ext string "md" or "json".
---@field root? string The project it was opened in (set for review buffers).

---@param path string
---@return string
local function real(path)
  return vim.uv.fs_realpath(path) or vim.fs.normalize(vim.fn.fnamemodify(path, ':p'))
end

---`$LOOPR_HOME`, else `~/.loopr` (not created, symlinks not resolved).
---@return string
function M.home()
  local env = vim.env.LOOPR_HOME
  if env and env ~= '' then
    return vim.fs.normalize(env)
  end
  return vim.fs.joinpath(vim.uv.os_homedir() or vim.fs.normalize('~'), '.loopr')
end

---Whether `path` lies inside `$LOOPR_HOME` (after resolving symlinks on both sides).
---@param path string
---@return boolean
function M.under_home(path)
  if path == '' then
    return false
  end
  path = vim.fs.normalize(vim.fn.fnamemodify(path, ':p'))
  local file = real(path)
  for _, home in ipairs({ M.home(), real(M.home()) }) do
    home = home:gsub('/+$', '') .. '/'
    if vim.startswith(path, home) or vim.startswith(file, home) then
      return true
    end
  end
  return false
end

---The loop an artifact file belongs to, from its path
---`$LOOPR_HOME/<project>/loops/<loop-id>/{iterations/NNN,current}/artifacts/<kind>.{md,json}`.
---@param path string
---@return loopr.ArtifactRef|nil ref nil when `path` is no artifact.
function M.artifact(path)
  if path == '' or not M.under_home(path) then
    return nil
  end
  path = vim.fs.normalize(vim.fn.fnamemodify(path, ':p'))
  local id, step, kind, ext = path:match('/loops/([^/]+)/(.-)/artifacts/(%a+)%.(%a+)$')
  local known = (kind == 'plan' or kind == 'spec' or kind == 'phase') and (ext == 'md' or ext == 'json')
  if not known or not (step == 'current' or step:find('^iterations/%d+$')) then
    return nil
  end
  return { loop_id = id, kind = kind, ext = ext }
end

---The artifact of buffer `buf` (default: the current one), or nil.
---@param buf? integer
---@return loopr.ArtifactRef|nil
function M.buf_artifact(buf)
  return M.artifact(vim.api.nvim_buf_get_name(buf or 0))
end

return M

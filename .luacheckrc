-- luacheck's settings for the Lua under lua/ and plugin/ (scripts/test.sh runs it through
-- scripts/lint-lua.sh). The plugin runs inside Neovim, on its LuaJIT.
std = 'luajit'

-- `vim` is Neovim's API: the plugin reads it and never replaces it. Only its option and
-- variable tables are meant to be assigned to (`vim.bo[buf].modifiable = false`,
-- `vim.g.loaded_loopr = 1`), so those alone are writable and a typo such as
-- `vim.fn = ...` or a global assigned by mistake is still reported.
local writable = { read_only = false, other_fields = true }
read_globals = {
  vim = {
    other_fields = true,
    fields = {
      g = writable,
      b = writable,
      w = writable,
      t = writable,
      v = writable,
      env = writable,
      o = writable,
      go = writable,
      bo = writable,
      wo = writable,
      opt = writable,
      opt_local = writable,
      opt_global = writable,
    },
  },
}

-- StyLua (.stylua.toml) keeps code within 120 columns; what it leaves longer are strings and
-- comments (LuaCATS annotations among them) that cannot be wrapped without changing them.
max_line_length = false

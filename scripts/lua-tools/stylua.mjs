// Runs StyLua (the npm package's WebAssembly build, pinned in package.json beside this file)
// over Lua files with the settings of the repository's `.stylua.toml`, the file the StyLua
// command line and editor plugins read too.
//
//   node stylua.mjs --check PATH...   print a diff for each file that is not formatted; exit 1
//   node stylua.mjs --write PATH...   format the files in place
//
// A PATH that is a directory stands for every `*.lua` file under it.
//
// The npm package is used rather than the StyLua binary because the binary's npm wrapper
// downloads it at install time from a host CI cannot reach, and `cargo install stylua`
// compiles for minutes on CI's 2 cores.
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const configFile = join(root, '.stylua.toml');
// scripts/ensure-lua-tools.sh installs the package there, out of the source tree.
const stylua = createRequire(join(root, '.cache', 'lua-tools', 'package.json'))('@johnnymorganz/stylua');

// The `.stylua.toml` keys this runner understands, each with the enum its string value names
// (null for a number or a boolean).
const keys = {
  column_width: null,
  indent_width: null,
  no_call_parentheses: null,
  indent_type: stylua.IndentType,
  line_endings: stylua.LineEndings,
  quote_style: stylua.QuoteStyle,
  call_parentheses: stylua.CallParenType,
  collapse_simple_statement: stylua.CollapseSimpleStatement,
  space_after_function_names: stylua.SpaceAfterFunctionNames,
  block_newline_gaps: stylua.BlockNewlineGaps,
  syntax: stylua.LuaVersion,
};

function fail(message) {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

// `.stylua.toml` holds only `key = value` lines, so a line-by-line reading is enough; anything
// else is refused rather than silently ignored.
function readSettings() {
  const settings = {};
  const text = readFileSync(configFile, 'utf8');
  text.split('\n').forEach((raw, index) => {
    const line = raw.replace(/#.*$/, '').trim();
    if (line === '') return;
    const where = `${relative(process.cwd(), configFile)}:${index + 1}`;
    const match = /^([a-z_]+)\s*=\s*(.+)$/.exec(line);
    if (!match || !(match[1] in keys)) {
      fail(`${where}: this StyLua runner does not understand "${raw.trim()}"; it reads only: ${Object.keys(keys).join(', ')}`);
    }
    const [, key, value] = match;
    const choices = keys[key];
    if (choices) {
      const name = /^"(.*)"$/.exec(value)?.[1];
      if (name === undefined || typeof choices[name] !== 'number') {
        const names = Object.keys(choices).filter((choice) => Number.isNaN(Number(choice)));
        fail(`${where}: ${key} must be one of ${names.map((n) => `"${n}"`).join(', ')}, not ${value}`);
      }
      settings[key] = choices[name];
    } else if (value === 'true' || value === 'false') {
      settings[key] = value === 'true';
    } else if (/^\d+$/.test(value)) {
      settings[key] = Number(value);
    } else {
      fail(`${where}: ${key} must be a number or true/false, not ${value}`);
    }
  });
  return settings;
}

// `formatCode` takes its Config by value (WebAssembly frees it), so each file gets a new one.
function newConfig(settings) {
  return Object.assign(stylua.Config.new(), settings);
}

function luaFiles(path, found) {
  if (statSync(path).isDirectory()) {
    for (const entry of readdirSync(path).sort()) luaFiles(join(path, entry), found);
  } else if (path.endsWith('.lua')) {
    found.push(path);
  }
  return found;
}

// StyLua 2.5.2 does not always reach its final layout in one pass (a call whose last argument
// is an indexed table literal moves again on the second), so a file is formatted until a pass
// changes nothing: `--check` then agrees with what `--write` leaves.
function settle(file, code) {
  let text = code;
  for (let pass = 0; pass < 5; pass += 1) {
    let formatted;
    try {
      formatted = stylua.formatCode(text, newConfig(settings), undefined, verification);
    } catch (error) {
      fail(`${file}: StyLua could not format it: ${error}`);
    }
    if (formatted === text) return text;
    text = formatted;
  }
  fail(`${file}: StyLua's layout still changed after 5 passes; reshape the code it keeps moving`);
}

const [mode, ...paths] = process.argv.slice(2);
if (!['--check', '--write'].includes(mode) || paths.length === 0) {
  fail('usage: node stylua.mjs --check|--write PATH...');
}
const settings = readSettings();
// What `--write` leaves must parse to the same program: StyLua checks that on each file it
// rewrites. `--check` changes nothing, so it skips that second parse.
const verification = mode === '--write' ? stylua.OutputVerification.Full : stylua.OutputVerification.None;
const files = paths.flatMap((path) => luaFiles(path, []));
const unformatted = [];
for (const file of files) {
  const code = readFileSync(file, 'utf8');
  const formatted = settle(file, code);
  if (formatted === code) continue;
  unformatted.push(file);
  if (mode === '--write') {
    writeFileSync(file, formatted);
  } else {
    // `diff` reads the formatted text from stdin and prints what StyLua would change.
    const diff = spawnSync('diff', ['-u', '--label', file, '--label', `${file} (formatted)`, file, '-'], {
      input: formatted,
      encoding: 'utf8',
    });
    process.stdout.write(diff.stdout);
  }
}
if (mode === '--check' && unformatted.length > 0) {
  process.stderr.write(
    `StyLua: ${unformatted.length} of ${files.length} Lua files are not formatted (diff above); ` +
      'run scripts/fmt.sh to format them\n',
  );
  process.exit(1);
}
const verb = mode === '--write' ? `formatted ${unformatted.length} of` : 'checked';
process.stderr.write(`StyLua: ${verb} ${files.length} Lua files\n`);

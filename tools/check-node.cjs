'use strict';
// Fails fast, in one line, when the Node running an npm script is older than the scripts need.
// Plain CommonJS that any Node runs: it must work on the old versions it refuses.
//
// The package itself runs on Node >= 22.12 (package.json `engines`). The scripts need more: the
// tests, the demo and the bench run TypeScript files directly (type stripping: 22.18), and the dev
// dependencies ask for 22.22 (testcontainers; undici 22.19).

var NEEDED = '22.22.0';

/** The message for `found` (a version such as "20.19.5"), or undefined when it is recent enough. */
function check(found, needed) {
  needed = needed || NEEDED;
  var a = found.split('.').map(Number);
  var b = needed.split('.').map(Number);
  for (var i = 0; i < 3; i += 1) {
    if ((a[i] || 0) > (b[i] || 0)) return undefined;
    if ((a[i] || 0) < (b[i] || 0)) {
      return (
        'resilimit: Node v' +
        found +
        ' found; the npm scripts need Node >= ' +
        needed +
        ' (they run TypeScript directly, and the dev dependencies ask for it; the package itself runs on >= 22.12). ' +
        'Install Node 24 (e.g. `nvm install 24`) and run the script again.'
      );
    }
  }
  return undefined;
}

module.exports = { check: check, NEEDED: NEEDED };

if (require.main === module) {
  var message = check(process.versions.node);
  if (message !== undefined) {
    process.stderr.write(message + '\n');
    process.exit(1);
  }
}

/**
 * A V8 CPU profile of a running process, started and stopped by signals: loaded with
 * `--require`, the first SIGUSR2 starts profiling, the next writes
 * `<OTM_PROFILE_DIR or the temp folder>/<args>-<pid>.cpuprofile` (summarise it with
 * `node bench/lib/profile-top.mjs <file>`). For processes that something else starts, such as the
 * roles of the distributed deployment in `npm run bench` (`--cpu-prof` is not allowed in
 * NODE_OPTIONS, and would profile the whole life of the process):
 *
 *   OTM_CHILD_NODE_OPTIONS="--require $PWD/bench/lib/profile-on-signal.cjs" npm run bench -- --only distributed &
 *   kill -USR2 <pid of otm ingress>; sleep 12; kill -USR2 <same pid>
 */
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const inspector = require('node:inspector');

let session;
process.on('SIGUSR2', () => {
  if (!session) {
    session = new inspector.Session();
    session.connect();
    session.post('Profiler.enable', () => session.post('Profiler.start'));
    return;
  }
  const s = session;
  session = undefined;
  s.post('Profiler.stop', (err, result) => {
    if (!err) {
      const name = process.argv
        .slice(2)
        .map((a) => path.basename(a).replace(/[^A-Za-z0-9.-]/g, ''))
        .join('-');
      const file = path.join(process.env.OTM_PROFILE_DIR || os.tmpdir(), `${name}-${process.pid}.cpuprofile`);
      fs.writeFileSync(file, JSON.stringify(result.profile));
      process.stderr.write(`cpu profile written: ${file}\n`);
    }
    s.disconnect();
  });
});

// Runs in the foreground on behalf of a child process: forwards SIGINT/SIGTERM to it (once:
// npm and the terminal often deliver the same Ctrl-C twice within a few ms) and exits with its
// exit code. Node built-ins only.
import os from 'node:os';

export function relay(child, fail, what) {
  let lastForward = { signal: null, at: 0 };
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.on(signal, () => {
      const now = Date.now();
      if (lastForward.signal === signal && now - lastForward.at < 500) return;
      lastForward = { signal, at: now };
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    });
  }
  child.on('error', (err) => fail(`could not ${what}: ${err.message}`));
  child.on('exit', (code, signal) => {
    process.exit(signal ? 128 + (os.constants.signals[signal] ?? 0) : (code ?? 1));
  });
}

#!/usr/bin/env node
// orbit-server: runs the TypeScript sources through tsx (a runtime dependency), so a checkout
// works right after `npm ci` without a build step.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../server/main.ts');
process.exitCode = await main();

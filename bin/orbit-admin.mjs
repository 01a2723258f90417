#!/usr/bin/env node
// orbit-admin: runs the TypeScript sources through tsx (a runtime dependency), so a checkout
// works right after `npm ci` without a build step.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../server/cli/orbit-admin.ts');
process.exitCode = await main(process.argv.slice(2));

#!/usr/bin/env node
import { launch } from './launch.mjs';

await launch('orbit-admin', '../server/cli/orbit-admin.ts', (m) => m.main(process.argv.slice(2)));

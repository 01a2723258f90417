#!/usr/bin/env node
import { launch } from './launch.mjs';

await launch('../server/cli/orbit-admin.ts', (m) => m.main(process.argv.slice(2)));

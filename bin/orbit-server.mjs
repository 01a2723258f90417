#!/usr/bin/env node
import { launch } from './launch.mjs';

await launch('../server/main.ts', (m) => m.main(process.argv.slice(2)));

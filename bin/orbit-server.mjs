#!/usr/bin/env node
import { launch } from './launch.mjs';

await launch('orbit-server', '../server/main.ts', (m) => m.main());

/**
 * asyncapi.yaml → frame types for both sides and strict validators:
 * - `server/generated/frames.ts` and `sdk/generated/frames.ts`: one type per frame,
 *   `WorkerFrame` (worker → server) and `ServerFrame` (server → worker) unions; the same
 *   contents written twice, so the server never imports sdk/.
 * - `server/generated/frame-validators.js`: Ajv standalone validators of worker frames, by type.
 * - `sdk/generated/frame-validators.js`: the same for server frames, used by the worker SDK.
 */
import { generatedHeader } from './header.ts';
import { validatorFiles } from './ajv-standalone.ts';
import { deref, isObject, loadYaml, pascal, type JsonObject } from './spec.ts';
import { typeOf } from './json-schema-types.ts';

const DEFINITIONS_ID = 'https://orbit.invalid/asyncapi/components';
const REF_PREFIX = '#/components/schemas/';

interface Frame {
  type: string;
  typeName: string;
  schema: JsonObject;
  summary: string | undefined;
}

function framesOf(doc: JsonObject, action: 'send' | 'receive'): Frame[] {
  const operations = isObject(doc.operations) ? doc.operations : {};
  const frames: Frame[] = [];
  for (const op of Object.values(operations)) {
    if (!isObject(op) || op.action !== action || !Array.isArray(op.messages)) continue;
    for (const ref of op.messages) {
      // `#/channels/session/messages/hello` → the channel's entry → `#/components/messages/hello`.
      const message = deref<JsonObject>(doc, deref<JsonObject>(doc, ref));
      const schema = deref<JsonObject>(doc, message.payload ?? {});
      const typeProp = isObject(schema.properties) ? schema.properties.type : undefined;
      const type = isObject(typeProp) ? typeProp.const : undefined;
      if (typeof type !== 'string') throw new Error(`message ${String(message.name)}: payload needs properties.type.const`);
      frames.push({ type, typeName: `${pascal(type)}Frame`, schema, summary: typeof message.summary === 'string' ? message.summary : undefined });
    }
  }
  return frames;
}

function generateTypes(doc: JsonObject, workerFrames: Frame[], serverFrames: Frame[]): string {
  const schemas = isObject(doc.components) && isObject(doc.components.schemas) ? doc.components.schemas : {};
  const frameNames = new Map<string, string>();
  for (const frame of [...workerFrames, ...serverFrames]) {
    for (const [name, schema] of Object.entries(schemas)) if (schema === frame.schema) frameNames.set(name, frame.typeName);
  }
  const refName = (ref: string) => {
    const name = ref.slice(REF_PREFIX.length);
    return frameNames.get(name) ?? name;
  };
  const lines = [generatedHeader('asyncapi.yaml')];
  for (const [name, schema] of Object.entries(schemas)) {
    if (frameNames.has(name)) continue;
    const doc = isObject(schema) && typeof schema.description === 'string' ? `/** ${schema.description} */\n` : '';
    lines.push(`${doc}export type ${name} = ${typeOf(schema, refName)};`, '');
  }
  for (const frame of [...workerFrames, ...serverFrames]) {
    if (frame.summary) lines.push(`/** ${frame.summary} */`);
    lines.push(`export interface ${frame.typeName} ${typeOf(frame.schema, refName)}`, '');
  }
  lines.push(`/** Frames a worker sends. */`);
  lines.push(`export type WorkerFrame = ${workerFrames.map((f) => f.typeName).join(' | ')};`);
  lines.push(`/** Frames the server sends. */`);
  lines.push(`export type ServerFrame = ${serverFrames.map((f) => f.typeName).join(' | ')};`);
  lines.push(`export const WORKER_FRAME_TYPES = ${JSON.stringify(workerFrames.map((f) => f.type))} as const;`);
  lines.push(`export const SERVER_FRAME_TYPES = ${JSON.stringify(serverFrames.map((f) => f.type))} as const;`);
  lines.push('');
  return lines.join('\n');
}

function generateValidators(doc: JsonObject, frames: Frame[]): { js: string; dts: string } {
  return validatorFiles({
    source: 'asyncapi.yaml',
    doc,
    refPrefix: REF_PREFIX,
    definitionsId: DEFINITIONS_ID,
    schemas: (convert) => Object.fromEntries(frames.map((frame) => [frame.type, convert(frame.schema)])),
  });
}

export function generateAsyncApi(root: string): Record<string, string> {
  const doc = loadYaml(`${root}/asyncapi.yaml`);
  const workerFrames = framesOf(doc, 'receive');
  const serverFrames = framesOf(doc, 'send');
  const server = generateValidators(doc, workerFrames);
  const sdk = generateValidators(doc, serverFrames);
  const types = generateTypes(doc, workerFrames, serverFrames);
  return {
    'server/generated/frames.ts': types,
    'sdk/generated/frames.ts': types,
    'server/generated/frame-validators.js': server.js,
    'server/generated/frame-validators.d.ts': server.dts,
    'sdk/generated/frame-validators.js': sdk.js,
    'sdk/generated/frame-validators.d.ts': sdk.dts,
  };
}

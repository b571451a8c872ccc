import type { ProxyInput } from './collection.ts';
import { badRequestBody, invalidStream, invalidToxicType, missingField, toxicAlreadyExists } from './errors.ts';
import { decodeJson, decodeStruct, GoJsonError, jsonKind, type DecodedFields, type GoStruct } from './goJson.ts';
import type { ProxyConfig } from './proxy.ts';
import type { ActiveToxic, Direction } from './toxic.ts';
import type { Attributes, ToxicKind } from './toxics/kind.ts';
import { toxicKind } from './toxics/registry.ts';

/**
 * Request bodies, decoded and checked in the order Toxiproxy checks them, so that a body with
 * several faults gets the same error as from Toxiproxy. Every failure is an `ApiError`.
 */

const PROXY: GoStruct = {
  name: 'Proxy',
  goType: 'toxiproxy.Proxy',
  fields: { name: 'string', listen: 'string', upstream: 'string', enabled: 'bool' },
};

const TOXIC: GoStruct = {
  name: 'ToxicWrapper',
  goType: 'toxics.ToxicWrapper',
  fields: { attributes: 'struct:toxics.NoopToxic', name: 'string', type: 'string', stream: 'string', toxicity: 'float32' },
};

/** `POST /proxies`: `enabled` defaults to true; `name` and `upstream` are required. */
export function parseProxyCreate(body: string): ProxyInput {
  const input = proxyInput(decode(body, PROXY));
  if (input.name === '') throw missingField('name');
  if (input.upstream === '') throw missingField('upstream');
  return input;
}

/** `POST /populate`: an array of proxies, every entry validated before any is applied. */
export function parsePopulate(body: string): ProxyInput[] {
  const list = decode(body, undefined);
  if (list === null) return [];
  if (!Array.isArray(list)) throw badRequestBody(`json: cannot unmarshal ${jsonKind(list)} into Go value of type []toxiproxy.Proxy`);
  const inputs = list.map((item: unknown) => proxyInput(guard(() => decodeStruct(item, PROXY))));
  inputs.forEach((input, index) => {
    if (input.name === '') throw missingField(`name at proxy ${index + 1}`);
    if (input.upstream === '') throw missingField(`upstream at proxy ${index + 1}`);
  });
  return inputs;
}

/** `PATCH /proxies/{name}`: every field left out keeps its current value. */
export function parseProxyUpdate(body: string, current: ProxyConfig): ProxyConfig {
  const fields = decode(body, PROXY);
  return {
    listen: fields.string('listen', current.listen),
    upstream: fields.string('upstream', current.upstream),
    enabled: fields.bool('enabled', current.enabled),
  };
}

/**
 * `POST /proxies/{name}/toxics`. Defaults: stream `downstream`, toxicity 1, name `<type>_<stream>`.
 * Checks, in order: JSON, stream, type, name taken (`exists`), attributes.
 */
export function parseToxicCreate(body: string, exists: (name: string) => boolean): ActiveToxic {
  const fields = decode(body, TOXIC);
  const stream = fields.string('stream', 'downstream');
  const direction = parseDirection(stream);
  if (!direction) throw invalidStream();
  const type = fields.string('type', '');
  const name = fields.string('name', '') || `${type}_${stream}`;
  const kind = toxicKind(type);
  if (!kind) throw invalidToxicType();
  if (exists(name)) throw toxicAlreadyExists();
  const attributes = parseAttributes(kind, fields.object('attributes'), kind.defaults);
  return { name, kind, stream, direction, toxicity: fields.number('toxicity', 1), attributes };
}

/**
 * `PATCH /proxies/{name}/toxics/{toxic}`: attributes merge over the current ones; a missing
 * toxicity keeps the current one. Other fields are ignored.
 */
export function parseToxicUpdate(body: string, current: ActiveToxic): ActiveToxic {
  const fields = decode(body, {
    name: '',
    goType: 'struct { Attributes interface {}; Toxicity float32 }',
    fields: { attributes: `struct:toxics.${current.kind.go.struct}`, toxicity: 'float32' },
  });
  const attributes = parseAttributes(current.kind, fields.object('attributes'), current.attributes);
  return { ...current, attributes, toxicity: fields.number('toxicity', current.toxicity) };
}

/** `stream`, case-insensitively, or undefined. */
function parseDirection(stream: string): Direction | undefined {
  const lower = stream.toLowerCase();
  return lower === 'upstream' || lower === 'downstream' ? lower : undefined;
}

/** `raw` decoded over `base` with the type's integer fields, then validated. */
function parseAttributes(kind: ToxicKind, raw: unknown, base: Attributes): Attributes {
  const struct: GoStruct = {
    name: kind.go.struct,
    goType: `toxics.${kind.go.struct}`,
    fields: Object.fromEntries(Object.keys(kind.defaults).map((field) => [field, kind.go.int])),
  };
  const attributes = { ...base, ...guard(() => decodeStruct(raw, struct, 'attributes.')).numbers() };
  const refusal = kind.validate?.(attributes);
  if (refusal !== undefined) throw badRequestBody(refusal);
  return attributes;
}

function proxyInput(fields: DecodedFields): ProxyInput {
  return {
    name: fields.string('name', ''),
    listen: fields.string('listen', ''),
    upstream: fields.string('upstream', ''),
    enabled: fields.bool('enabled', true),
  };
}

/** The body parsed, then decoded into `struct` (or just parsed when `struct` is undefined). */
function decode(body: string, struct: GoStruct): DecodedFields;
function decode(body: string, struct: undefined): unknown;
function decode(body: string, struct: GoStruct | undefined): unknown {
  return guard(() => {
    const value = decodeJson(body);
    return struct ? decodeStruct(value, struct) : value;
  });
}

/** Runs a decode step, turning a Go-worded decode error into `400 bad request body: …`. */
function guard<T>(step: () => T): T {
  try {
    return step();
  } catch (error) {
    if (error instanceof GoJsonError) throw badRequestBody(error.message);
    throw error;
  }
}

/**
 * Request bodies, decoded and checked in the order Toxiproxy checks them, so that a body with several
 * faults gets the error Toxiproxy would give first. Every failure is an `ApiError`.
 */
import { JsonFields, parseJson } from './body.ts';
import type { ProxyInput } from './collection.ts';
import { badRequestBody, invalidStream, invalidToxicType, missingField, toxicAlreadyExists } from './errors.ts';
import type { ProxyConfig } from './proxy.ts';
import type { ActiveToxic, Direction } from './toxic.ts';
import type { Attributes, ToxicKind } from './toxics/kind.ts';
import { toxicKind } from './toxics/registry.ts';

/** `POST /proxies`: `enabled` defaults to true; `name` and `upstream` are required. */
export function parseProxyCreate(body: string): ProxyInput {
  const input = proxyInput(new JsonFields(parseJson(body)));
  if (input.name === '') throw missingField('name');
  if (input.upstream === '') throw missingField('upstream');
  return input;
}

/** `POST /populate`: an array of proxies, every entry checked before any is applied. */
export function parsePopulate(body: string): ProxyInput[] {
  const list = parseJson(body);
  if (list === null) return [];
  if (!Array.isArray(list)) throw badRequestBody('expected an array of proxies');
  const inputs = list.map((item: unknown) => proxyInput(new JsonFields(item)));
  inputs.forEach((input, index) => {
    if (input.name === '') throw missingField(`name at proxy ${index + 1}`);
    if (input.upstream === '') throw missingField(`upstream at proxy ${index + 1}`);
  });
  return inputs;
}

/** `PATCH /proxies/{name}`: every field left out keeps its current value. */
export function parseProxyUpdate(body: string, current: ProxyConfig): ProxyConfig {
  const fields = new JsonFields(parseJson(body));
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
  const fields = new JsonFields(parseJson(body));
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
 * `PATCH /proxies/{name}/toxics/{toxic}`: attributes merge over the current ones; a missing toxicity
 * keeps the current one. Other fields are ignored.
 */
export function parseToxicUpdate(body: string, current: ActiveToxic): ActiveToxic {
  const fields = new JsonFields(parseJson(body));
  const attributes = parseAttributes(current.kind, fields.object('attributes'), current.attributes);
  return { ...current, attributes, toxicity: fields.number('toxicity', current.toxicity) };
}

/** `stream`, case-insensitively (Toxiproxy accepts `UpStream`), or undefined. */
function parseDirection(stream: string): Direction | undefined {
  const lower = stream.toLowerCase();
  return lower === 'upstream' || lower === 'downstream' ? lower : undefined;
}

/** The type's attributes read over `base` (other keys are ignored), every one an integer, then validated. */
function parseAttributes(kind: ToxicKind, fields: JsonFields, base: Attributes): Attributes {
  const attributes = Object.fromEntries(Object.keys(kind.defaults).map((name) => [name, fields.integer(name, base[name] ?? 0)]));
  const refusal = kind.validate?.(attributes);
  if (refusal !== undefined) throw badRequestBody(refusal);
  return attributes;
}

function proxyInput(fields: JsonFields): ProxyInput {
  return {
    name: fields.string('name', ''),
    listen: fields.string('listen', ''),
    upstream: fields.string('upstream', ''),
    enabled: fields.bool('enabled', true),
  };
}

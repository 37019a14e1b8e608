/**
 * Configuration loading with validation errors that name the field: every component describes
 * its config with a zod schema; a bad file fails with `<source>: <field.path>: <problem>` lines.
 */
import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';

export class ConfigError extends Error {
  constructor(
    readonly source: string,
    readonly issues: Array<{ field: string; message: string }>,
  ) {
    super(`invalid configuration in ${source}:\n` + issues.map((i) => `  ${i.field}: ${i.message}`).join('\n'));
    this.name = 'ConfigError';
  }
}

/** Validates `raw` against `schema`; throws ConfigError naming each offending field. */
export function validateConfig<S extends z.ZodType>(schema: S, raw: unknown, source: string): z.output<S> {
  const result = schema.safeParse(raw);
  if (result.success) return result.data;
  throw new ConfigError(
    source,
    result.error.issues.map((issue) => ({
      field: issue.path.length ? issue.path.map(String).join('.') : '(root)',
      message: issue.message,
    })),
  );
}

/** Reads a YAML or JSON file (YAML is a superset) and validates it. */
export async function loadConfigFile<S extends z.ZodType>(schema: S, file: string): Promise<z.output<S>> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new ConfigError(file, [{ field: '(file)', message: (err as Error).message }]);
  }
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (err) {
    throw new ConfigError(file, [{ field: '(syntax)', message: (err as Error).message }]);
  }
  return validateConfig(schema, raw ?? {}, file);
}

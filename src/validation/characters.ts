// Characters no store keeps, and nesting deeper than any request the API takes, found in any string or key
// of a request part before the schema and the rules look at it.
import { RANK, type Ranked } from './ranks.js';

/** Deeper than any body or query the API takes; the walk below stops there instead of following an attack. */
export const MAX_DEPTH = 32;

/** What an email tag's name and value may hold (contract.md), their length apart. */
export const TAG_CHARACTERS = '^[A-Za-z0-9_-]*$';

interface Node {
  value: unknown;
  parent: Node | undefined;
  key: string | number;
  depth: number;
}

/** The detail of a problem found at `node`: the part's own when it is the part itself (Ranked.whole). */
function detail(node: Node, message: string): Ranked {
  const field = pathOf(node);
  return node.parent
    ? { field, message, rank: RANK.chars }
    : { field, message, rank: RANK.chars, whole: true };
}

function pathOf(node: Node): string {
  let out = '';
  for (let n: Node | undefined = node; n?.parent; n = n.parent) {
    out =
      typeof n.key === 'number' ? `[${n.key}]${out}` : n.parent.parent ? `.${n.key}${out}` : `${n.key}${out}`;
  }
  return out;
}

/** Whether the text is printable US-ASCII (and tabs) only: what a mail header can carry unencoded. */
export function isPrintableAscii(text: string): boolean {
  return /^[\x20-\x7e\t]*$/.test(text);
}

// Node 20 has String.prototype.isWellFormed; the ES2022 lib this project compiles against does not declare it.
type WellFormed = string & { isWellFormed(): boolean };

function charProblem(s: string): string | undefined {
  // PostgreSQL text cannot hold NUL, and a lone surrogate is stored as U+FFFD (one or three of them,
  // by store): neither can be kept as sent, so neither is accepted.
  if (s.includes('\u0000')) return 'must not contain NUL characters';
  if (!(s as WellFormed).isWellFormed()) return 'must be well-formed Unicode (no lone surrogates)';
  return undefined;
}

/**
 * Every string and key, at any depth up to MAX_DEPTH, checked for characters no store keeps. Iterative, so no
 * input can overflow the stack; paths are built only for what is reported. Returns false if the value is
 * nested deeper than MAX_DEPTH.
 */
export function characterDetails(data: unknown, out: Ranked[]): boolean {
  let shallow = true;
  const stack: Node[] = [{ value: data, parent: undefined, key: '', depth: 0 }];
  for (let node = stack.pop(); node; node = stack.pop()) {
    const { value } = node;
    if (typeof value === 'string') {
      const problem = charProblem(value);
      if (problem) out.push(detail(node, problem));
      continue;
    }
    if (typeof value !== 'object' || value === null) continue;
    if (node.depth >= MAX_DEPTH) {
      // Named where the bound is reached; a schema that wanted something flatter names an ancestor, and
      // then this one is left out (bestPerField, ranks.ts).
      out.push(detail(node, `must not be nested more than ${MAX_DEPTH} levels deep`));
      shallow = false;
      continue;
    }
    const depth = node.depth + 1;
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--)
        stack.push({ value: value[i], parent: node, key: i, depth });
      continue;
    }
    const entries = Object.entries(value);
    for (let i = entries.length - 1; i >= 0; i--) {
      const [k, v] = entries[i]!;
      const problem = charProblem(k);
      if (problem) out.push(detail(node, problem.replace(/^must/, 'keys must')));
      stack.push({ value: v, parent: node, key: k, depth });
    }
  }
  return shallow;
}

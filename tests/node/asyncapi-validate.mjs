// Checks AsyncAPI documents with the official parser (the one AsyncAPI's own tools use)
// and prints its diagnostics as JSON, by file: severity 0 is an error, 1 a warning.
//   node asyncapi-validate.mjs FILE...
import { readFile } from "node:fs/promises";
import { Parser } from "@asyncapi/parser";

const parser = new Parser();
const found = {};
for (const file of process.argv.slice(2)) {
  const diagnostics = await parser.validate(await readFile(file, "utf8"));
  found[file] = diagnostics.map((d) => ({
    code: d.code,
    severity: d.severity,
    message: d.message,
    path: d.path,
  }));
}
console.log(JSON.stringify(found));

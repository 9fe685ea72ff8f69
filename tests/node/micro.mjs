// Asks NATS micro services what `nats micro ls|info|stats` ask, through the
// official JavaScript client's services client, and prints the answers as JSON.
//   node micro.mjs SERVER ping|info|stats [NAME]
import { connect } from "nats";

const [server, verb, name] = process.argv.slice(2);
const nc = await connect({ servers: server });
try {
  const client = nc.services.client();
  const answers = [];
  for await (const answer of await client[verb](name)) {
    answers.push(answer);
  }
  console.log(JSON.stringify(answers));
} finally {
  await nc.close();
}

